"""Hugging Face Trainer on a random-init Llama-style model (168M parameters, 8192 tokens/step).

    roofscope run benchmarks/real_clients/hf_trainer_llama.py              # eager
    roofscope run benchmarks/real_clients/hf_trainer_llama.py --compile    # TrainingArguments(torch_compile=True)

Used as its users use it: TrainingArguments + Trainer, bf16, nothing downloaded.
"""
from __future__ import annotations

import argparse
import tempfile

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

p = argparse.ArgumentParser()
p.add_argument("--compile", nargs="?", const="default", metavar="MODE",
               help="TrainingArguments(torch_compile=True, torch_compile_mode=MODE)")
p.add_argument("--steps", type=int, default=7)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--seq", type=int, default=1024)
args = p.parse_args()


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, n: int, seq: int, vocab: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, seq), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


config = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                     num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=args.seq)
with torch.device("cuda"):
    model = LlamaForCausalLM(config)
data = RandomTokens(args.batch * (args.steps + 1), args.seq, config.vocab_size)
with tempfile.TemporaryDirectory() as out:
    targs = TrainingArguments(output_dir=out, per_device_train_batch_size=args.batch, max_steps=args.steps,
                              bf16=True, report_to=[], save_strategy="no", logging_steps=1000,
                              torch_compile=bool(args.compile), dataloader_num_workers=0, disable_tqdm=True,
                              **({"torch_compile_mode": args.compile} if args.compile not in (None, "default") else {}))
    Trainer(model=model, args=targs, train_dataset=data).train()
