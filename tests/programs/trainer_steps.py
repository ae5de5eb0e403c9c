"""A HuggingFace ``Trainer`` run as its users write one, with the NVTX lines NVIDIA's guide adds: a callback opening a
range (domain ``trainer``, named ``train_step``) around each training step. The model: a small Llama from a config
(random weights, no download); the data: random token ids. No nsightflow import.

``--out FILE``: write the Trainer's own numbers there at the end (its ``total_flos``: transformers' estimate of 6 ·
parameters outside the embeddings · tokens, summed over the steps; the steps; the tokens per step).
"""

import argparse
import json

import nvtx
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments


class StepRanges(TrainerCallback):
    """One NVTX range per training step: forward, backward and the optimizer's step inside it."""

    def on_step_begin(self, args, state, control, **kwargs):
        nvtx.push_range("train_step", domain="trainer")

    def on_step_end(self, args, state, control, **kwargs):
        nvtx.pop_range(domain="trainer")


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int, seq: int, vocab: int) -> None:
        self.ids = torch.randint(0, vocab, (n, seq), generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--out", required=True)
    parser.add_argument("--cpu", action="store_true")
    a = parser.parse_args()
    cuda = torch.cuda.is_available() and not a.cpu
    config = LlamaConfig(
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=512,
        max_position_embeddings=256,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    args = TrainingArguments(
        output_dir=a.out + ".trainer",
        max_steps=a.steps,
        per_device_train_batch_size=a.batch,
        learning_rate=1e-4,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
        use_cpu=not cuda,
        bf16=cuda,
    )
    trainer = Trainer(
        model=model, args=args, train_dataset=Tokens(a.batch * a.steps, a.seq, 512), callbacks=[StepRanges()]
    )
    trainer.train()
    numbers = {"total_flos": trainer.state.total_flos, "steps": trainer.state.global_step, "tokens": a.batch * a.seq}
    with open(a.out, "w") as f:
        json.dump(numbers, f)


if __name__ == "__main__":
    main()
