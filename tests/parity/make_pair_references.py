"""Hugging Face's per-sequence quantities of preference pairs, for tests/mpi/test_pair_scoring.cpp.

    python make_pair_references.py OUT MODELS_DIR

MODELS_DIR is make_models.py's output (the `models` fixture). Written to OUT:
  pairs.safetensors   the pairs: prompt_ids, chosen_ids, rejected_ids int64, flat, with
                      prompt_lengths, chosen_lengths, rejected_lengths int64 [N]; margin float32 [N]
  <model>.safetensors for each reward model (<name>_sequence_reward) and causal LM
                      (<name>_causal_lm) of MODELS_DIR, float64 [N] each:
                        reward model   chosen_score, rejected_score: the model's logit for the
                                       prompt + response, run alone and unpadded
                        causal LM      chosen_logp_sum, rejected_logp_sum, chosen_logp_mean,
                                       rejected_logp_mean: the response tokens' log-probs
                                       (log_softmax of the logits at the position before each),
                                       summed and averaged, the sequence run alone and unpadded
                      metadata: the model directory and its head.
Token ids lie in [1, vocab): never the pad id 0, which HF's sequence classification looks for.
"""
import os
import sys

import torch

PAIRS = [  # (prompt length, chosen length, rejected length)
    (4, 3, 5), (1, 1, 2), (6, 5, 1), (2, 4, 4), (3, 2, 3),
]


def make_pairs(vocab, gen):
    out = {k: [] for k in ("prompt", "chosen", "rejected")}
    for lengths in PAIRS:
        for key, n in zip(("prompt", "chosen", "rejected"), lengths):
            out[key].append(torch.randint(1, vocab, (n,), generator=gen))
    # A pair whose responses share their first token, as real pairs often do.
    out["rejected"][3][0] = out["chosen"][3][0]
    return out


def hf_values(model, head, pairs):
    vals = {}
    with torch.no_grad():
        for side in ("chosen", "rejected"):
            score, lp_sum, lp_mean = [], [], []
            for p, r in zip(pairs["prompt"], pairs[side]):
                ids = torch.cat([p, r]).unsqueeze(0)
                out = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits.double()
                if head == "sequence_reward":
                    score.append(out[0, 0])
                else:
                    P, A = len(p), len(r)
                    lp = torch.log_softmax(out[0, P - 1:P + A - 1], -1).gather(-1, r.unsqueeze(-1)).squeeze(-1)
                    lp_sum.append(lp.sum())
                    lp_mean.append(lp.mean())
            if head == "sequence_reward":
                vals[f"{side}_score"] = torch.stack(score)
            else:
                vals[f"{side}_logp_sum"] = torch.stack(lp_sum)
                vals[f"{side}_logp_mean"] = torch.stack(lp_mean)
    return vals


def main():
    out_dir, models_dir = sys.argv[1], sys.argv[2]
    import transformers as tf
    from safetensors.torch import save_file
    tf.utils.logging.set_verbosity_error()
    os.makedirs(out_dir, exist_ok=True)
    names = sorted(n for n in os.listdir(models_dir)
                   if n.endswith(("_sequence_reward", "_causal_lm")) and
                   os.path.isfile(os.path.join(models_dir, n, "config.json")))
    if not names:
        sys.exit(f"make_pair_references: no models under {models_dir} (run make_models.py first)")
    vocab = min(tf.AutoConfig.from_pretrained(os.path.join(models_dir, n)).vocab_size for n in names)
    pairs = make_pairs(vocab, torch.Generator().manual_seed(17))
    flat = {f"{k}_ids": torch.cat(v).contiguous() for k, v in pairs.items()}
    flat.update({f"{k}_lengths": torch.tensor([len(x) for x in v], dtype=torch.int64) for k, v in pairs.items()})
    flat["margin"] = torch.tensor([0.0, 0.5, -1.0, 0.0, 2.0], dtype=torch.float32)
    save_file(flat, os.path.join(out_dir, "pairs.safetensors"))
    for name in names:
        head = "sequence_reward" if name.endswith("_sequence_reward") else "causal_lm"
        d = os.path.join(models_dir, name)
        cls = tf.AutoModelForSequenceClassification if head == "sequence_reward" else tf.AutoModelForCausalLM
        model = cls.from_pretrained(d, attn_implementation="eager").float().eval()
        save_file(hf_values(model, head, pairs), os.path.join(out_dir, f"{name}.safetensors"),
                  metadata={"dir": os.path.abspath(d), "head": head})
    print(f"make_pair_references: {len(names)} models -> {out_dir}")


if __name__ == "__main__":
    main()
