"""A new user's CPU fine-tune: HF Trainer on a small random-init BERT, random token batches.

Own timer: a TrainerCallback times each optimizer step, end to end (the batch's loading included); the median
of the second half is printed as `median step X ms (own timer)`.

    python hf_trainer_tiny_bert.py [--steps 30] [--batch 16] [--seq 128] [--compile] [--item-ms MS] [--workers N]
        [--no-dropout] [--fallback-random]

--item-ms gives each sample about MS ms of pure-Python work in the dataset (text cleaning and tokenizing, as a
dataset of raw text does); --workers is TrainingArguments' dataloader_num_workers, roofscope's loader fix.

--compile is roofscope's fix as its text writes it for an HF Trainer (TrainingArguments(..., torch_compile=True)),
to check its verdict in plain runs.
"""
import argparse
import tempfile
import time

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback, TrainingArguments

from own_timer import report   # this folder's: the timer line plain_pairs.sh reads

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=30)
p.add_argument("--batch", type=int, default=16)
p.add_argument("--seq", type=int, default=128)
p.add_argument("--compile", action="store_true")
p.add_argument("--item-ms", type=float, default=0.0)
p.add_argument("--workers", type=int, default=0)
p.add_argument("--no-dropout", action="store_true", help="hidden and attention dropout 0 (BERT's default is 0.1)")
p.add_argument("--fallback-random", action="store_true",
               help="torch._inductor.config.fallback_random = True: compiled code draws dropout masks with ATen's")
args = p.parse_args()
if args.fallback_random:
    import torch._inductor.config

    torch._inductor.config.fallback_random = True

torch.manual_seed(0)
cfg = BertConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
                 vocab_size=8000, num_labels=2,
                 **({"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0} if args.no_dropout else {}))
model = BertForSequenceClassification(cfg)


class Random(torch.utils.data.Dataset):
    def __len__(self):
        return args.batch * args.steps

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        end = time.perf_counter() + args.item_ms / 1e3
        text = "the quick brown fox " * 20
        while time.perf_counter() < end:   # CPU work, as cleaning and tokenizing raw text is
            text = " ".join(sorted(text.split(), key=len))
        return {"input_ids": torch.randint(0, cfg.vocab_size, (args.seq,), generator=g),
                "attention_mask": torch.ones(args.seq, dtype=torch.long),
                "labels": torch.randint(0, 2, (), generator=g)}


class Timer(TrainerCallback):
    """The time from one optimizer step's end to the next's: the batch's loading included, which the Trainer
    does before on_step_begin."""

    def __init__(self):
        self.times, self.t = [], None

    def on_step_end(self, *a, **k):
        now = time.perf_counter()
        if self.t is not None:
            self.times.append(now - self.t)
        self.t = now


timer = Timer()
with tempfile.TemporaryDirectory() as out:
    targs = TrainingArguments(output_dir=out, per_device_train_batch_size=args.batch, max_steps=args.steps,
                              use_cpu=True, report_to=[], logging_steps=10, save_strategy="no",
                              dataloader_num_workers=args.workers, disable_tqdm=True, torch_compile=args.compile)
    Trainer(model=model, args=targs, train_dataset=Random(), callbacks=[timer]).train()
report(timer.times)
