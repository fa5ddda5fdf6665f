"""flash-linear-attention's language models trained for speed on the GPU (bench/gpu_speed.sh's FLA rows).

Builds FLA's own model (fla.models: GLAForCausalLM, GatedDeltaNetForCausalLM) with the architecture of a seqtrain
config (its --print-config on stdin: d_model, n_layers, the mixer's heads / expand_k / expand_v / gates / conv, the
SwiGLU MLP's width, tied or untied head, vocab), trains it on random tokens with AdamW (weight decay on matrices,
clipping at 1.0) and prints one line

    fla_train: model=gla params=N tokens_per_s=X peak_mem_mib=M

with the median tokens/s of the timed steps (after --warmup steps, which also run Triton's autotuning) and
torch.cuda.max_memory_allocated. fp32 = fp32 tensors and no TF32 matmuls, tf32 = TF32 matmuls, bf16 = autocast.
FLA comes from PYTHONPATH (../shared/anchors/fla, a source snapshot). Used to measure, never copied from.

A mixer with selective_rope enabled is built from the Selective RoPE authors' package instead (selective_rope.models:
their GLA and Gated DeltaNet models, FLA's with the SelectiveRoPE module on q and k; from PYTHONPATH too,
../shared/anchors/selective-rope/src), with the block's options mapped to the module's (phi_proj_rank,
phi_parametrization, skip_conv, conv_act, use_gate, use_bias, temp_type / temp_theta / temp_max) and its backend
from --selrope-backend (triton, their fused kernel, or torch).

--bypass-hopper-guard: FLA refuses its gated chunk backward (chunk_bwd_dqkwg: Gated DeltaNet, GLA's gk path) on
Hopper GPUs with Triton >= 3.4 and < 3.7.1, whose compiler gives wrong results there (FLA issue #640). With the flag,
FLA's version check is overridden so the step runs and can be timed; its gradients may then be wrong, so the number
is a speed reference only, and the result line says guard=bypassed.
"""
import argparse
import contextlib
import json
import statistics
import sys
import time

import torch


def selrope_embedding(sr, backend):
    """The Selective RoPE authors' position_embedding of a seqtrain selective_rope block (None when it is off)."""
    if not sr or not sr["enabled"]:
        return None
    if not sr["conv"] and not sr["skip_conv"]:
        sys.exit("fla_train: selective_rope conv false without skip_conv is a seqtrain addition the authors' module "
                 "does not have")
    return dict(type="selective_rope", phi_proj_rank=sr["phi_proj_rank"],
                phi_parametrization="full-rank" if sr["full_rank"] else "low-rank", skip_conv=sr["skip_conv"],
                conv_act="silu" if sr["conv_act"] == "silu" else None, use_gate=sr["use_gate"],
                use_bias=sr["use_bias"], temp_type=sr["temp_type"], temp_theta=sr["temp_theta"],
                temp_max=sr["temp_max"], use_triton=backend == "triton")


def fla_model(cfg, vocab, selrope_backend="triton"):
    """FLA's model of the seqtrain config cfg (the resolved JSON): the same widths, heads, gates, MLP and head; with
    selective_rope, the Selective RoPE authors' model of it."""
    m = cfg["model"]
    mix = m["mixer"]
    C = m["d_model"]
    common = dict(hidden_size=C, num_hidden_layers=m["n_layers"], vocab_size=vocab,
                  intermediate_size=int(round(m["mlp"]["ratio"] * C)), tie_word_embeddings=m["tie_embeddings"],
                  fuse_cross_entropy=True, fuse_norm=True, fuse_swiglu=True)
    pe = selrope_embedding(mix.get("selective_rope"), selrope_backend)
    if pe:
        common["position_embedding"] = pe
    if mix["kind"] == "gla":
        if pe:
            from selective_rope.models.gla import GLAConfig, GLAForCausalLM
        else:
            from fla.models import GLAConfig, GLAForCausalLM
        conv = mix["conv"] if mix["conv"] > 1 else 0
        fc = GLAConfig(num_heads=mix["heads"], expand_k=mix["expand_k"], expand_v=mix["expand_v"],
                       use_short_conv=conv > 0, conv_size=max(conv, 1), use_output_gate=mix["output_gate"],
                       norm_eps=mix["norm_eps"], **common)
        # GLAForCausalLM builds its layers with the gate's defaults (low rank 16, logit normalizer 16)
        if mix["gate_rank"] != 16 or mix["gate_normalizer"] != 16:
            sys.exit("fla_train: FLA's GLA model takes gate_rank 16 and gate_normalizer 16 only")
        return GLAForCausalLM(fc)
    if mix["kind"] == "gated_deltanet":
        if pe:
            from selective_rope.models.gated_deltanet import GatedDeltaNetConfig, GatedDeltaNetForCausalLM
        else:
            from fla.models import GatedDeltaNetConfig, GatedDeltaNetForCausalLM
        fc = GatedDeltaNetConfig(num_heads=mix["heads"], head_dim=int(round(mix["expand_k"] * C / mix["heads"])),
                                 expand_v=mix["expand_v"], use_short_conv=mix["conv"] > 1, conv_size=max(mix["conv"], 1),
                                 use_gate=mix["use_gate"], allow_neg_eigval=mix["allow_neg_eigval"],
                                 norm_eps=mix["norm_eps"], **common)
        return GatedDeltaNetForCausalLM(fc)
    sys.exit(f"fla_train: mixer {mix['kind']!r} has no FLA model here (gla, gated_deltanet)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default="bf16")
    ap.add_argument("--batch-size", type=int, required=True)
    ap.add_argument("--seq-len", type=int, required=True)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--selrope-backend", choices=["triton", "torch"], default="triton",
                    help="the Selective RoPE authors' module's backend (use_triton), for a selective_rope mixer")
    ap.add_argument("--bypass-hopper-guard", action="store_true",
                    help="time FLA's gated backward on Hopper with Triton < 3.7.1 (wrong gradients: speed only)")
    args = ap.parse_args()
    if args.bypass_hopper_guard:
        import fla.ops.common.chunk_o as chunk_o
        chunk_o.TRITON_ABOVE_3_7_1 = True
        print("fla_train: Hopper guard bypassed: timing only, gradients may be wrong (FLA #640)", file=sys.stderr)
    cfg = json.load(sys.stdin)
    torch.backends.cuda.matmul.allow_tf32 = args.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = args.precision == "tf32"
    torch.manual_seed(1337)
    model = fla_model(cfg, args.vocab, args.selrope_backend).cuda()
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embeddings" not in n]
    other = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embeddings" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=3e-4, foreach=True)
    B, T = args.batch_size, args.seq_len
    g = torch.Generator().manual_seed(0)
    rates = []
    for step in range(args.warmup + args.steps):
        # FLA's causal LM shifts the labels itself: labels = the inputs, T predictions a row (the last ignored)
        tok = torch.randint(0, args.vocab, (B, T), generator=g).cuda()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16) if args.precision == "bf16" else contextlib.nullcontext():
            loss = model(input_ids=tok, labels=tok).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        torch.cuda.synchronize()
        if step >= args.warmup:
            rates.append(B * T / (time.perf_counter() - t0))
    sr = cfg["model"]["mixer"].get("selective_rope") or {}
    kind = cfg["model"]["mixer"]["kind"] + (f"+selective_rope({args.selrope_backend})" if sr.get("enabled") else "")
    print(f"fla_train: model={kind} params={n_params} "
          f"tokens_per_s={statistics.median(rates):.0f} peak_mem_mib={torch.cuda.max_memory_allocated() >> 20} "
          f"loss={loss.item():.4f}" + (" guard=bypassed" if args.bypass_hopper_guard else ""))


if __name__ == "__main__":
    main()
