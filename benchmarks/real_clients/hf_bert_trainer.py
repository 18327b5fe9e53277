"""Hugging Face Trainer on a random-init BertForSequenceClassification (bert-base shape): fp16,
batch 32 x 256 tokens, optim adamw_torch_fused, max_grad_norm 1.0 (foreach gradient clipping,
GradScaler's unscale, fused AdamW). Nothing downloaded. Prints its own per-step times from a
TrainerCallback (CUDA events around each optimizer step's training step).

    roofscope run benchmarks/real_clients/hf_bert_trainer.py
    roofscope run benchmarks/real_clients/hf_bert_trainer.py --compile
"""
from __future__ import annotations

import argparse
import tempfile

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback, TrainingArguments

p = argparse.ArgumentParser()
p.add_argument("--compile", action="store_true", help="TrainingArguments(torch_compile=True)")
p.add_argument("--steps", type=int, default=7)
p.add_argument("--batch", type=int, default=32)
p.add_argument("--seq", type=int, default=256)
args = p.parse_args()


class RandomText(torch.utils.data.Dataset):
    def __init__(self, n: int, seq: int, vocab: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, seq), generator=g)
        self.labels = torch.randint(0, 2, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "attention_mask": torch.ones_like(self.ids[i]), "labels": self.labels[i]}


class StepTimes(TrainerCallback):
    """``step N: X ms`` per optimizer step, timed on the GPU."""

    def on_step_begin(self, targs, state, control, **kw) -> None:
        self.start = torch.cuda.Event(enable_timing=True)
        self.start.record()

    def on_step_end(self, targs, state, control, **kw) -> None:
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        end.synchronize()
        print(f"step {state.global_step}: {self.start.elapsed_time(end):.2f} ms", flush=True)


config = BertConfig()  # bert-base: 12 layers, hidden 768, 110M parameters
model = BertForSequenceClassification(config).cuda()
data = RandomText(args.batch * (args.steps + 1), args.seq, config.vocab_size)
with tempfile.TemporaryDirectory() as out:
    targs = TrainingArguments(output_dir=out, per_device_train_batch_size=args.batch, max_steps=args.steps,
                              fp16=True, optim="adamw_torch_fused", max_grad_norm=1.0, report_to=[],
                              torch_compile=args.compile, save_strategy="no", logging_steps=1000,
                              dataloader_num_workers=0, disable_tqdm=True)
    Trainer(model=model, args=targs, train_dataset=data, callbacks=[StepTimes()]).train()
