"""Reference models and outputs for the C++ transformer parity tests (tests/unit/test_model.cpp).

    python make_models.py OUT                  build every tiny random model and its reference
    python make_models.py --check-saved LIST   load directories the C++ side saved and compare

Building: for each family configuration and head, a tiny Hugging Face model with random weights
(seeded, fp32, CPU, eager attention) is written with save_pretrained to OUT/<name>_<head>/, and
beside it reference.safetensors with the inputs and HF's outputs:

  input_ids, attention_mask [B, T] int64   a left-padded batch (pad = config.pad_token_id)
  logits [B, T, V] | values [B, T] | scores [B]     plain forward, explicit position ids
                                                    (attention_mask.cumsum(-1) - 1).clamp(min=0)
  logits_seq{b} [L_b, V] | values_seq{b} [L_b] | scores_seq{b} [1]   each sequence alone, unpadded
  causal LM only:
  gen_prompt, gen_prompt_mask [B, T]       the prompt of the greedy generation reference
  gen_tokens [B, 8]                        model.generate(greedy, 8 new tokens, no stop token)
  gen_logits [B, T + 8, V]                 plain forward over prompt + generated tokens
  gen_margin [1] float64                   smallest top-1 minus top-2 logit over all greedy steps
  {key}_hf_bf16                            only where CUDA is available: the same forward with
                                           the model in bfloat16 on the GPU (HF's own bf16 error)
and, where transformers 4 wrote the configuration differently (rotary settings, no layer_types),
config_v4.json: the same model's config.json in the older layout (see write_v4_config).
Also OUT/gptj6b_parameters.json: HF's parameter shapes for inputs/models/gpt-j-6b/config.json.

The file's metadata names the model (name, family, model_type, head, architecture). Every
parameter, norm weights and biases included, is re-drawn from the seeded generator so that no
weight keeps HF's constant initialisation (ones / zeros) that a loader bug could hide behind.

Checking (--check-saved LIST): LIST is a text file of lines "<head> <architecture> <saved_dir>
<outputs>" where <outputs> is a safetensors file with the C++ side's input_ids, attention_mask
and output (logits / values / scores). Each directory is loaded with the Auto class of its head,
which must build <architecture>; the outputs must agree to 1e-4 relative error at real
positions. Prints "ok ..." or "FAIL ..." per directory; exit status 0 only if all agree.
"""
import copy
import json
import os
import sys
import time

import torch

HEADS = ("causal_lm", "token_value", "sequence_reward")
REL_TOL = 1e-4
N_NEW = 8
PAD = 0
VOCAB = 160
LENGTHS = (9, 6, 3)  # B = 3 sequences of different lengths, left-padded to T = 9
MIN_MARGIN = 2e-3    # greedy steps must not be near-ties (fp32 noise must not flip a token)


def configs():
    import transformers as tf

    common_llama = dict(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        rms_norm_eps=1e-6, pad_token_id=PAD, bos_token_id=1, eos_token_id=2,
        attn_implementation="eager")
    out = {}
    out["llama"] = ("llama", tf.LlamaConfig(**common_llama, tie_word_embeddings=False))
    out["llama_tied"] = ("llama", tf.LlamaConfig(**common_llama, tie_word_embeddings=True))
    # original_max_position_embeddings 32 with head_dim 16, theta 10000: the rotary wavelengths
    # (6.3, 19.9, 62.8, ...) fall in all three llama3 regimes (kept: < 32/4, smoothed: 8..32,
    # divided by factor: > 32).
    out["llama_rope_llama3"] = ("llama", tf.LlamaConfig(
        **common_llama, tie_word_embeddings=False,
        rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 32}))
    # Llama 3.1's shape, scaled down: max_position_embeddings (64) beyond
    # original_max_position_embeddings (8), which the test sequences (9 prompt + 8 generated
    # tokens) pass too. low/high_freq_factor 0.25/1 put the wavelengths in all three regimes
    # again (kept: < 8, smoothed: 8..32, divided by factor: > 32).
    out["llama_rope_llama3_long"] = ("llama", tf.LlamaConfig(
        **common_llama, tie_word_embeddings=False,
        rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                         "low_freq_factor": 0.25, "high_freq_factor": 1.0,
                         "original_max_position_embeddings": 8}))
    out["llama_rope_linear"] = ("llama", tf.LlamaConfig(
        **common_llama, tie_word_embeddings=False,
        rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}))
    out["mistral"] = ("mistral", tf.MistralConfig(
        **{k: v for k, v in common_llama.items()}, tie_word_embeddings=False, sliding_window=None))
    out["qwen2"] = ("qwen2", tf.Qwen2Config(
        **{k: v for k, v in common_llama.items()}, tie_word_embeddings=False,
        use_sliding_window=False))
    # Sliding windows of 4 slots, shorter than the test sequences (up to 9 prompt + 8 generated
    # tokens), so that the window changes every output past the fourth token. Mistral slides
    # every layer; Qwen2 with max_window_layers=1 has layer_types [full, sliding].
    out["mistral_sliding"] = ("mistral", tf.MistralConfig(
        **{k: v for k, v in common_llama.items()}, tie_word_embeddings=False, sliding_window=4))
    out["qwen2_sliding"] = ("qwen2", tf.Qwen2Config(
        **{k: v for k, v in common_llama.items()}, tie_word_embeddings=False,
        use_sliding_window=True, sliding_window=4, max_window_layers=1))
    # Qwen3: q_norm and k_norm over each head, an explicit head_dim (24) that is not
    # hidden_size / heads (16). The sliding one: window 4 on layer 1 (max_window_layers=1),
    # tied embeddings and attention_bias (q, k, v and o biases).
    out["qwen3"] = ("qwen3", tf.Qwen3Config(
        **common_llama, head_dim=24, tie_word_embeddings=False, use_sliding_window=False))
    out["qwen3_sliding"] = ("qwen3", tf.Qwen3Config(
        **common_llama, head_dim=16, tie_word_embeddings=True, attention_bias=True,
        use_sliding_window=True, sliding_window=4, max_window_layers=1))
    out["gpt2"] = ("gpt2", tf.GPT2Config(
        vocab_size=VOCAB, n_positions=64, n_embd=64, n_layer=2, n_head=4, n_inner=128,
        activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        summary_first_dropout=0.0, pad_token_id=PAD, bos_token_id=1, eos_token_id=2,
        attn_implementation="eager"))
    out["gptj"] = ("gptj", tf.GPTJConfig(
        vocab_size=VOCAB, n_positions=64, n_embd=64, n_layer=2, n_head=4, n_inner=128,
        rotary_dim=8, activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0, pad_token_id=PAD, bos_token_id=1, eos_token_id=2,
        tie_word_embeddings=False, attn_implementation="eager"))
    common_neox = dict(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=64, hidden_act="gelu",
        rotary_pct=0.25, rotary_emb_base=10000, layer_norm_eps=1e-5, hidden_dropout=0.0,
        attention_dropout=0.0, classifier_dropout=0.0, pad_token_id=PAD, bos_token_id=1,
        eos_token_id=2, tie_word_embeddings=False, attn_implementation="eager")
    out["gpt_neox"] = ("gpt_neox", tf.GPTNeoXConfig(**common_neox, use_parallel_residual=True))
    out["gpt_neox_seq"] = ("gpt_neox", tf.GPTNeoXConfig(**common_neox, use_parallel_residual=False))
    return out


def head_class(model_type, head):
    import transformers as tf
    prefix = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3", "gpt2": "GPT2",
              "gptj": "GPTJ", "gpt_neox": "GPTNeoX"}[model_type]
    suffix = {"causal_lm": "ForCausalLM", "token_value": "ForTokenClassification",
              "sequence_reward": "ForSequenceClassification"}[head]
    if model_type == "gpt2" and head == "causal_lm":
        return tf.GPT2LMHeadModel  # GPT-2's causal LM keeps its historical name
    return getattr(tf, prefix + suffix)


# (name, head) pairs: every config as a causal LM; value and reward heads for a few families.
def plan():
    pairs = [(name, "causal_lm") for name in configs()]
    for name in ("llama", "qwen2", "qwen3", "gpt2", "gpt_neox"):
        pairs.append((name, "token_value"))
        pairs.append((name, "sequence_reward"))
    pairs.append(("gptj", "sequence_reward"))  # HF has no GPTJForTokenClassification
    pairs.append(("qwen2_sliding", "sequence_reward"))
    return pairs


def randomize(model, gen):
    """Re-draws every parameter: embeddings N(0, 0.3), matrices N(0, 1.2/sqrt(fan_in)) (GELU MLP
    outputs 0.4/sqrt(fan_in)), norm weights 1 + N(0, 0.1), other vectors (biases) N(0, 0.1).
    Tied parameters are drawn once."""
    with torch.no_grad():
        for name, p in model.named_parameters():  # named_parameters yields a tied tensor once
            if p.dim() >= 2:
                fan_in = p.shape[1] if "c_attn" not in name and ".c_" not in name else p.shape[0]
                if "wte" in name or "wpe" in name or "embed" in name:
                    std = 0.3
                elif any(k in name for k in ("mlp.c_proj", "fc_out", "dense_4h_to_h")):
                    # GELU outputs have a positive mean, so a full-size output projection adds
                    # the same vector to every token; smaller, it keeps greedy decoding varied
                    std = 0.4 / fan_in ** 0.5
                else:
                    std = 1.2 / fan_in ** 0.5
                p.copy_(torch.randn(p.shape, generator=gen) * std)
            elif "norm" in name or ".ln" in name or "ln_" in name or "layernorm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))


def positions(mask):
    return (mask.cumsum(-1) - 1).clamp(min=0)


def make_batch(gen, lengths=LENGTHS):
    T = max(lengths)
    ids = torch.full((len(lengths), T), PAD, dtype=torch.int64)
    mask = torch.zeros((len(lengths), T), dtype=torch.int64)
    for b, n in enumerate(lengths):
        # real tokens avoid the pad id (sequence classification finds the last non-pad token)
        ids[b, T - n:] = torch.randint(1, VOCAB, (n,), generator=gen)
        mask[b, T - n:] = 1
    return ids, mask


def head_output(model, head, ids, mask):
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions(mask)).logits
    if head == "causal_lm":
        return out
    return out.squeeze(-1)  # values [B, T] or scores [B]


def greedy_manual(model, ids, mask, n):
    """Greedy decoding by full recomputation with explicit positions; returns tokens, margin."""
    tokens, margin = [], float("inf")
    for _ in range(n):
        logits = head_output(model, "causal_lm", ids, mask)[:, -1, :]
        top2 = logits.topk(2, dim=-1).values
        margin = min(margin, float((top2[:, 0] - top2[:, 1]).min()))
        nxt = logits.argmax(-1, keepdim=True)
        tokens.append(nxt)
        ids = torch.cat([ids, nxt], dim=1)
        mask = torch.cat([mask, torch.ones_like(nxt)], dim=1)
    return torch.cat(tokens, dim=1), margin


def build_one(out_dir, name, model_type, config, head, seed):
    import transformers as tf
    from safetensors.torch import save_file

    torch.manual_seed(seed)
    cls = head_class(model_type, head)
    kwargs = {"num_labels": 1} if head != "causal_lm" else {}
    cfg = config.__class__.from_dict(config.to_dict())
    for k, v in kwargs.items():
        setattr(cfg, k, v)
    cfg._attn_implementation = "eager"
    model = cls(cfg).eval()
    gen = torch.Generator().manual_seed(seed)
    randomize(model, gen)
    model = model.float().eval()

    ref = {}
    # Prompts: redraw (deterministically) until greedy decoding has no near-tie, so the C++
    # side's token-for-token comparison cannot be flipped by fp32 rounding.
    for attempt in range(50):
        ids, mask = make_batch(gen)
        if head != "causal_lm":
            break
        gen_tokens_manual, margin = greedy_manual(model, ids, mask, N_NEW)
        if margin >= MIN_MARGIN:
            break
    else:
        raise SystemExit(f"{name}_{head}: no prompt without near-ties in greedy decoding")

    ref["input_ids"], ref["attention_mask"] = ids, mask
    key = {"causal_lm": "logits", "token_value": "values", "sequence_reward": "scores"}[head]
    ref[key] = head_output(model, head, ids, mask)
    for b, n in enumerate(LENGTHS):
        seq = ids[b:b + 1, ids.shape[1] - n:]
        alone = head_output(model, head, seq, torch.ones_like(seq))[0]
        ref[f"{key}_seq{b}"] = alone.reshape(-1) if head == "sequence_reward" else alone
        # sanity: HF itself is left-padding invariant at real positions with these positions
        padded = ref[key][b] if head == "sequence_reward" else ref[key][b, ids.shape[1] - n:]
        err = (padded - ref[f"{key}_seq{b}"].reshape(padded.shape)).abs().max()
        scale = ref[f"{key}_seq{b}"].abs().max()
        if not err <= REL_TOL * scale:
            raise SystemExit(f"{name}_{head}: HF not left-padding invariant ({err} vs {scale})")

    if head == "causal_lm":
        model.generation_config.eos_token_id = None
        model.generation_config.bos_token_id = None
        gcfg = tf.GenerationConfig(do_sample=False, max_new_tokens=N_NEW, min_new_tokens=N_NEW,
                                   pad_token_id=PAD, eos_token_id=None, num_beams=1)
        with torch.no_grad():
            out = model.generate(ids, attention_mask=mask, generation_config=gcfg)
        new = out[:, ids.shape[1]:]
        if new.shape != (len(LENGTHS), N_NEW) or not torch.equal(new, gen_tokens_manual):
            raise SystemExit(f"{name}_{head}: HF generate {new.tolist()} != manual greedy "
                             f"{gen_tokens_manual.tolist()}")
        ref["gen_prompt"], ref["gen_prompt_mask"], ref["gen_tokens"] = ids, mask, new.contiguous()
        full = torch.cat([ids, new], dim=1)
        full_mask = torch.cat([mask, torch.ones_like(new)], dim=1)
        ref["gen_logits"] = head_output(model, "causal_lm", full, full_mask)
        ref["gen_margin"] = torch.tensor([margin], dtype=torch.float64)

    meta = {"name": name, "family": model_type, "model_type": model.config.model_type,
            "head": head, "architecture": cls.__name__}
    if torch.cuda.is_available():
        # HF's own bf16 error on this GPU: the yardstick of the C++ GpuBf16 suite.
        m16 = copy.deepcopy(model).to(device="cuda", dtype=torch.bfloat16).eval()
        out16 = head_output(m16, head, ids.cuda(), mask.cuda())
        ref[f"{key}_hf_bf16"] = out16.float().cpu()
        meta["bf16_device"] = torch.cuda.get_device_name(0)
        del m16

    d = os.path.join(out_dir, f"{name}_{head}")
    model.save_pretrained(d)
    save_file({k: v.detach().clone().contiguous() for k, v in ref.items()}, os.path.join(d, "reference.safetensors"),
              metadata=meta)
    write_v4_config(d)
    return d, ref, model.config


def write_v4_config(d):
    """Beside config.json (transformers 5 layout: "rope_parameters"), config_v4.json with the
    same model in the layout that transformers 4 wrote and most hub checkpoints still have:
    rope_theta at the top, "rope_scaling" for a scaled rope, rotary_pct / rotary_emb_base for
    GPT-NeoX. Only written where the two layouts differ."""
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    rope = cfg.pop("rope_parameters", None)
    if not rope:
        return
    rope = dict(rope)
    theta = rope.pop("rope_theta", 10000.0)
    if cfg["model_type"] == "gpt_neox":
        cfg["rotary_emb_base"] = theta
        cfg["rotary_pct"] = rope.pop("partial_rotary_factor", 1.0)
    else:
        cfg["rope_theta"] = theta
    rope.pop("partial_rotary_factor", None)
    # transformers 4 (before 4.53) wrote no layer_types: Qwen2 and Qwen3 derived them from
    # max_window_layers, which quartet must then do too.
    if cfg["model_type"] in ("qwen2", "qwen3"):
        cfg.pop("layer_types", None)
    if rope.get("rope_type", "default") != "default":
        rope["type"] = rope["rope_type"]
        cfg["rope_scaling"] = rope
    else:
        cfg["rope_scaling"] = None
    cfg["transformers_version"] = "4.46.0"
    with open(os.path.join(d, "config_v4.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)


def write_gptj6b_parameters(out_dir):
    """OUT/gptj6b_parameters.json: the parameters (name -> shape) and their total count of
    GPTJForCausalLM built by transformers, on the meta device, from the repository's
    inputs/models/gpt-j-6b/config.json: what the C++ side's meta-device model must match."""
    import transformers as tf
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "inputs", "models",
                        "gpt-j-6b", "config.json")
    cfg = tf.GPTJConfig.from_json_file(path)
    with torch.device("meta"):
        model = tf.GPTJForCausalLM(cfg)
    shapes = {n: list(p.shape) for n, p in model.named_parameters()}
    total = sum(p.numel() for p in model.parameters())
    with open(os.path.join(out_dir, "gptj6b_parameters.json"), "w") as f:
        json.dump({"config": os.path.abspath(path), "total": total, "shapes": shapes}, f, indent=1)
    print(f"wrote gptj6b_parameters.json: {total} parameters in {len(shapes)} tensors", flush=True)


def build(out_dir):
    import transformers as tf
    import safetensors
    start = time.time()
    os.makedirs(out_dir, exist_ok=True)
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    cfgs = configs()
    written = []
    for i, (name, head) in enumerate(plan()):
        model_type, config = cfgs[name]
        d, ref, cfg = build_one(out_dir, name, model_type, config, head, seed=1000 + i)
        extra = ""
        if head == "causal_lm":
            extra = f" greedy margin {float(ref['gen_margin'][0]):.3g}"
        print(f"wrote {d} ({cfg.architectures[0]}, {sum(1 for _ in ref)} reference tensors){extra}",
              flush=True)
        written.append(os.path.basename(d))
    write_gptj6b_parameters(out_dir)
    with open(os.path.join(out_dir, "versions.json"), "w") as f:
        json.dump({"torch": torch.__version__, "transformers": tf.__version__,
                   "safetensors": safetensors.__version__, "models": written}, f, indent=1)
    print(f"{len(written)} models in {time.time() - start:.1f} s "
          f"(torch {torch.__version__}, transformers {tf.__version__})", flush=True)


def check_saved(list_file):
    import transformers as tf
    from safetensors.torch import load_file
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    auto = {"causal_lm": tf.AutoModelForCausalLM, "token_value": tf.AutoModelForTokenClassification,
            "sequence_reward": tf.AutoModelForSequenceClassification}
    key = {"causal_lm": "logits", "token_value": "values", "sequence_reward": "scores"}
    ok = True
    with open(list_file) as f:
        lines = [line.split() for line in f if line.strip()]
    for head, arch, d, outputs in lines:
        try:
            model, info = auto[head].from_pretrained(d, attn_implementation="eager",
                                                     dtype=torch.float32, output_loading_info=True)
            model = model.eval()
            problems = {k: v for k, v in info.items() if k != "error_msgs" and v}
            if problems or info.get("error_msgs"):
                raise ValueError(f"loading report {info}")
            cxx = load_file(outputs)
            ids, mask = cxx["input_ids"], cxx["attention_mask"]
            hf = head_output(model, head, ids, mask)
            mine = cxx[key[head]]
            real = mask.bool() if head != "sequence_reward" else torch.ones_like(hf, dtype=torch.bool)
            err = float((hf - mine)[real].abs().max())
            scale = float(hf[real].abs().max())
            good = (hf.shape == mine.shape and err <= REL_TOL * scale
                    and type(model).__name__ == arch)
            print(f"{'ok  ' if good else 'FAIL'} {d}: {type(model).__name__} max|hf-c++| {err:.3g}"
                  f" (max|hf| {scale:.3g})", flush=True)
            ok = ok and good
        except Exception as e:  # report every directory, then fail
            print(f"FAIL {d}: {type(e).__name__}: {e}", flush=True)
            ok = False
    return 0 if ok and lines else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check-saved":
        sys.exit(check_saved(sys.argv[2]))
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    build(sys.argv[1])
