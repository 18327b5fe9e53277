"""A new user's CPU LoRA fine-tune: a small random-init Llama with PEFT LoRA adapters, driven by accelerate
with 2 micro-batches of gradient accumulation per optimizer step.

Own timer: wall clock per optimizer step (both micro-batches) with time.perf_counter; the median of the
second half is printed as `median step X ms (own timer)`.

    python accelerate_lora_cpu.py [--steps 20] [--batch 4] [--seq 128] [--accum 2] [--compile]

--compile is roofscope's fix as its text writes it for accelerate (Accelerator(dynamo_backend="inductor")), to
check its verdict in plain runs.
"""
import argparse
import time

import torch
from accelerate import Accelerator
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

from own_timer import report   # this folder's: the timer line plain_pairs.sh reads

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=20)
p.add_argument("--batch", type=int, default=4)
p.add_argument("--seq", type=int, default=128)
p.add_argument("--accum", type=int, default=2)
p.add_argument("--compile", action="store_true")
args = p.parse_args()
torch.manual_seed(0)
cfg = LlamaConfig(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=4, vocab_size=4000, max_position_embeddings=512)
model = get_peft_model(LlamaForCausalLM(cfg), LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                                                        task_type="CAUSAL_LM"))
opt = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad], lr=1e-4)
data = torch.randint(0, cfg.vocab_size, (args.steps * args.accum * args.batch, args.seq))
loader = torch.utils.data.DataLoader(data, batch_size=args.batch)
acc = Accelerator(cpu=True, gradient_accumulation_steps=args.accum, dynamo_backend="inductor" if args.compile else "no")
model, opt, loader = acc.prepare(model, opt, loader)
times, t, loss = [], time.perf_counter(), None
for i, ids in enumerate(loader):
    with acc.accumulate(model):
        loss = model(input_ids=ids, labels=ids).loss
        acc.backward(loss)
        opt.step()
        opt.zero_grad()
    if acc.sync_gradients:
        now = time.perf_counter()
        times.append(now - t)
        t = now
print(f"loss {loss.item():.4f}")
report(times)
