"""Hugging Face Trainer: BERT-base sequence classification, fp16, batch 32 x 256, random init.

    python benchmarks/real_clients/hf_bert_trainer.py              # eager
    python benchmarks/real_clients/hf_bert_trainer.py --compile    # TrainingArguments(torch_compile=True)
    python benchmarks/real_clients/hf_bert_trainer.py --compile reduce-overhead   # + CUDA graphs
    roofscope run benchmarks/real_clients/hf_bert_trainer.py

Used as its users use it: TrainingArguments + Trainer with the fused AdamW and gradient clipping,
nothing downloaded. The script's own timer is a TrainerCallback: the host time between
consecutive `on_step_end` calls (own_clock.py).
"""
from __future__ import annotations

import argparse
import tempfile

import torch
from own_clock import StepClock
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback, TrainingArguments

p = argparse.ArgumentParser()
p.add_argument("--compile", nargs="?", const="default", metavar="MODE",
               help="TrainingArguments(torch_compile=True, torch_compile_mode=MODE)")
p.add_argument("--steps", type=int, default=60)
p.add_argument("--batch", type=int, default=32)
p.add_argument("--seq", type=int, default=256)
args = p.parse_args()


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, n: int, seq: int, vocab: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, seq), generator=g)
        self.labels = torch.randint(0, 2, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


class Tick(TrainerCallback):
    def __init__(self, clock: StepClock) -> None:
        self.clock = clock

    def on_step_end(self, targs, state, control, **kw):
        self.clock.tick()


config = BertConfig()
with torch.device("cuda"):
    model = BertForSequenceClassification(config)
data = RandomTokens(args.batch * (args.steps + 1), args.seq, config.vocab_size)
clock = StepClock()
with tempfile.TemporaryDirectory() as out:
    targs = TrainingArguments(output_dir=out, per_device_train_batch_size=args.batch, max_steps=args.steps,
                              fp16=True, optim="adamw_torch_fused", max_grad_norm=1.0, report_to=[],
                              save_strategy="no", logging_steps=1000, torch_compile=bool(args.compile),
                              dataloader_num_workers=0, disable_tqdm=True,
                              **({"torch_compile_mode": args.compile} if args.compile not in (None, "default") else {}))
    Trainer(model=model, args=targs, train_dataset=data, callbacks=[Tick(clock)]).train()
clock.report()
