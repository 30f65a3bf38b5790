"""`neuromanifold dim`: Dimension of one architecture."""

from __future__ import annotations

from typing import Optional

import typer

from ..core.checks import bad_value, check_seed
from ..models.families import COUNTING_RULES, listed
from .common import (DECODER, EXIT_AMBIGUOUS, METHOD, NETWORK, OUTPUT, RESOURCES,
                     TimeLimitReached, build_block_architecture, check_timeout, print_json,
                     print_stopped, stderr_progress, text_width, time_limit)


def dim(
    widths: Optional[str] = typer.Option(None, help="Widths d_0,...,d_l, e.g. 5,3,3,5 (commas, no "
                                         "spaces; required unless --hf-config).",
                                         rich_help_panel=NETWORK),
    keys: Optional[str] = typer.Option(None, help="Key widths a_1,...,a_l, e.g. 2,2,2, or one width "
                                       "for every layer, e.g. 2 (required unless --hf-config).",
                                       rich_help_panel=NETWORK),
    tokens: int = typer.Option(3, help="Number of tokens t.", rich_help_panel=NETWORK),
    attention: str = typer.Option("lightning", help="lightning or softmax.",
                                  rich_help_panel=NETWORK),
    temperature: float = typer.Option(1.0, help="Softmax temperature tau in exp(x / tau).",
                                      rich_help_panel=NETWORK),
    heads: Optional[str] = typer.Option(None, help="Heads per layer H_1,...,H_l, or one count "
                                        "for every layer (default 1 each); "
                                        "--keys is then the per-head key width.",
                                        rich_help_panel=NETWORK),
    values: Optional[str] = typer.Option(None, help="Per-head value widths v_1,...,v_l (or one for "
                                         "every layer) with an output "
                                         "projection (V = O W); default: one value matrix per head.",
                                         rich_help_panel=NETWORK),
    residual: bool = typer.Option(False, "--residual", help="Residual connections Z + att(Z) "
                                  "(and around the MLP); needs equal widths.",
                                  rich_help_panel=NETWORK),
    mlp: Optional[str] = typer.Option(None, help="MLP width after each attention layer m_1,...,m_l, "
                                      "or one for every layer (0: none).", rich_help_panel=NETWORK),
    activation: str = typer.Option("square", help="MLP activation: square, relu, gelu, tanh, silu "
                                   "or gelu_tanh (GPT-2's gelu_new).", rich_help_panel=NETWORK),
    norm: str = typer.Option("none", help="Pre-norm before attention and MLP: none, layernorm or rmsnorm.",
                             rich_help_panel=NETWORK),
    causal: bool = typer.Option(False, "--causal", help="Causal mask: output token i aggregates "
                                "tokens j <= i only.", rich_help_panel=DECODER),
    kv_heads: Optional[str] = typer.Option(None, "--kv-heads", help="Key/value groups per layer "
                                           "G_1,...,G_l (each dividing --heads; 1: multi-query, "
                                           "as Falcon, PaLM): transformers' grouping, the heads "
                                           "of a group share the key and value maps (native Q "
                                           "and V or W), each keeps its query map (native K) "
                                           "and O.", rich_help_panel=DECODER),
    bias: bool = typer.Option(False, "--bias", help="Biases on each head's query, key and value "
                              "maps and one on the layer's output.", rich_help_panel=DECODER),
    mlp_bias: bool = typer.Option(False, "--mlp-bias", help="Biases on the MLP's maps (needs --mlp).",
                                  rich_help_panel=DECODER),
    mlp_kind: str = typer.Option("plain", "--mlp-kind", help="plain (U s(P y)) or gated "
                                 "(U (s(G y) * (P y)); SwiGLU with --activation silu).",
                                 rich_help_panel=DECODER),
    positions: str = typer.Option("none", help="Token positions: none, learned (a d_0 x t table "
                                  "added to the input) or rope (rotary, rational angles).",
                                  rich_help_panel=DECODER),
    rope_pairs: Optional[str] = typer.Option(None, "--rope-pairs", help="With --positions rope: "
                                             "coordinate pairs R_1,...,R_l rotated in each "
                                             "head's queries and keys (default all a_i // 2).",
                                             rich_help_panel=DECODER),
    vocab: Optional[int] = typer.Option(None, help="Vocabulary size V: inputs are token-id "
                                        "sequences embedded by E (V x d_0), outputs V logits "
                                        "per token (a finite input set of V^t sequences).",
                                        rich_help_panel=DECODER),
    tied: bool = typer.Option(False, "--tied", help="With --vocab: logits by the embedding's "
                              "transpose E (needs d_l = d_0) instead of an untied L.",
                              rich_help_panel=DECODER),
    qk_norm: bool = typer.Option(False, "--qk-norm", help="Normalise each head's queries and "
                                 "keys (the --norm kind, with gains) before the scores.",
                                 rich_help_panel=DECODER),
    final_norm: bool = typer.Option(False, "--final-norm", help="A norm (the --norm kind, with "
                                    "a gain) after the last layer, before the logits.",
                                    rich_help_panel=DECODER),
    parallel: bool = typer.Option(False, "--parallel", help="Parallel blocks Z + att(Z) + mlp(Z) "
                                  "(GPT-J, GPT-NeoX, Falcon); needs --residual and --mlp.",
                                  rich_help_panel=DECODER),
    norm_bias: bool = typer.Option(False, "--norm-bias", help="A bias after each layernorm gain "
                                   "(GPT-2's LayerNorm beta; needs --norm layernorm).",
                                   rich_help_panel=DECODER),
    norm_eps: float = typer.Option(1e-5, "--norm-eps", help="The norms' epsilon (a model's "
                                   "layer_norm_eps / rms_norm_eps).", rich_help_panel=DECODER),
    rope_base: Optional[float] = typer.Option(None, "--rope-base", help="With --positions rope: "
                                              "the model's rotary base (theta_f = base^(-(f-1)/R)) "
                                              "instead of the rational angles; not over F_p.",
                                              rich_help_panel=DECODER),
    no_out_bias: bool = typer.Option(False, "--no-out-bias", help="With --bias: q/k/v biases "
                                     "only, no output bias (Qwen2).", rich_help_panel=DECODER),
    embed_scale: float = typer.Option(1.0, "--embed-scale", help="With --vocab: the embedding "
                                      "times this scale (Gemma: sqrt(d)); not over F_p.",
                                      rich_help_panel=DECODER),
    gqa: bool = typer.Option(False, "--gqa", help="Deprecated, ignored: --kv-heads alone is "
                             "transformers' grouped-query attention.", rich_help_panel=DECODER),
    post_norm: bool = typer.Option(False, "--post-norm", help="With --residual and --norm: BERT's "
                                   "post-norm blocks N(Z + att(Z)), N(Y + mlp(Y)).",
                                   rich_help_panel=DECODER),
    embed_norm: bool = typer.Option(False, "--embed-norm", help="With --vocab and --norm: a norm "
                                    "on the summed embedding (BERT).", rich_help_panel=DECODER),
    token_types: Optional[int] = typer.Option(None, "--token-types", help="With --vocab: T >= 2 "
                                              "token types, a table added to the embedding; "
                                              "inputs are (token, type) sequences (BERT: 2).",
                                              rich_help_panel=DECODER),
    hidden_output: bool = typer.Option(False, "--hidden-output", help="With --vocab (untied): the "
                                       "last hidden state as the output, no logits (BertModel).",
                                       rich_help_panel=DECODER),
    shared_norm: bool = typer.Option(False, "--shared-norm", help="With --parallel: the MLP "
                                     "reads the attention's normalised input (one norm per "
                                     "block, Falcon-7B; no n_i).", rich_help_panel=DECODER),
    qk_norm_shared: bool = typer.Option(False, "--qk-norm-shared", help="With --qk-norm: one "
                                        "QK-norm gain per layer shared by the heads (Qwen3; "
                                        "qn_i, kn_i).", rich_help_panel=DECODER),
    method: str = typer.Option("auto", help="auto, numerical, exact or certified (softmax and other non-polynomial networks, blocks included: certified proves by ball arithmetic; auto escalates thin gaps).",
                               rich_help_panel=METHOD),
    samples: Optional[int] = typer.Option(None, help="Input samples N (default: grown until the rank saturates).",
                                          rich_help_panel=METHOD),
    seed: int = typer.Option(0, help="Random seed for weights and inputs.", rich_help_panel=METHOD),
    device: str = typer.Option("cpu", help="cpu, cuda or auto (numerical method).",
                               rich_help_panel=RESOURCES),
    prime: Optional[int] = typer.Option(None, help="Prime p < 2^31 for the exact and certified methods "
                                        "(default 2147483629).", rich_help_panel=METHOD),
    precision: Optional[int] = typer.Option(None, help="Bits of the ball arithmetic that certifies a "
                                            "softmax or other non-polynomial rank (certified/auto; "
                                            "default 128).", rich_help_panel=METHOD),
    engine: str = typer.Option("verified", help="Lower-bound engine of certified/auto: verified "
                               "(the verified float64 certificate first, arb balls where floats "
                               "cannot separate) or ball (arb balls only, to cross-check it).",
                               rich_help_panel=METHOD),
    as_json: bool = typer.Option(False, "--json", help="One JSON object on stdout.",
                                 rich_help_panel=OUTPUT),
    max_memory: Optional[str] = typer.Option(None, help="Refuse (exit 2) when the estimated peak "
                                             "exceeds this: 16G, 500M, or a fraction such as 0.5 "
                                             "of the available memory (default 0.8); with "
                                             "--device cuda, of the GPU's free memory.",
                                             rich_help_panel=RESOURCES),
    backend: str = typer.Option("local", help="local, or dask: the numerical rank's Jacobian rows "
                                "computed and reduced on a Dask cluster (a LocalCluster of 2 "
                                "workers without --scheduler).", rich_help_panel=RESOURCES),
    scheduler: Optional[str] = typer.Option(None, help="Dask scheduler address, e.g. "
                                            "tcp://host:8786 (with --backend dask).",
                                            rich_help_panel=RESOURCES),
    hf_config: Optional[str] = typer.Option(None, "--hf-config", help="A Hugging Face config.json "
                                            f"of a family with counting rules ({listed(COUNTING_RULES)}): "
                                            "measure it shrunk.", rich_help_panel=NETWORK),
    shrink: Optional[str] = typer.Option(None, help="With --hf-config: the shrunk sizes, "
                                         "key=value pairs joined by commas, e.g. "
                                         "layers=2,heads=4,vocab=7; keys: layers, hidden, heads, "
                                         "kv_heads, head_dim, intermediate, vocab; a size left "
                                         "out is the config's own (default: the shrink of count "
                                         "--validate); --tokens gives the sequence length.",
                                         rich_help_panel=NETWORK),
    timeout: Optional[float] = typer.Option(None, help="Seconds of wall time; past them the "
                                            "computation stops with status `stopped` and exit "
                                            "code 1 (as a sweep item's timeout).",
                                            rich_help_panel=RESOURCES),
) -> None:
    """Dimension of the neuromanifold of one architecture, with how it was obtained."""
    check_seed(seed)
    if gqa:  # deprecated: said once on stderr, so --json output stays clean
        typer.echo("neuromanifold: note: --gqa is deprecated and ignored: --kv-heads alone is "
                   "transformers' grouping.", err=True)
    timeout = check_timeout(timeout)
    from ..core.scheduler import check_backend  # noqa: PLC0415

    backend = check_backend(backend.lower(), scheduler)
    real = {"norm-bias": (norm_bias, False), "norm-eps": (norm_eps, 1e-5),
            "rope-base": (rope_base, None), "no-out-bias": (no_out_bias, False),
            "embed-scale": (embed_scale, 1.0), "post-norm": (post_norm, False),
            "embed-norm": (embed_norm, False), "token-types": (token_types, None),
            "hidden-output": (hidden_output, False), "shared-norm": (shared_norm, False),
            "qk-norm-shared": (qk_norm_shared, False)}
    if hf_config is not None or shrink is not None:
        for name, (value, default) in real.items():
            if value != default:
                raise bad_value(name, "left out with --hf-config (the shrunk model's "
                                "architecture comes from the config)", value, f"Drop --{name}.")
        if backend == "dask":
            raise bad_value("backend", "'local' with --hf-config", backend,
                            "Drop --backend dask: shrunk Hugging Face models run on this machine.")
        from .hfdim import check_hf_options, hf_dim  # noqa: PLC0415

        check_hf_options(method=method, attention=attention, temperature=temperature,
                         samples=samples, prime=prime, precision=precision, engine=engine,
                         heads=heads,
                         values=values, residual=residual, mlp=mlp, activation=activation,
                         norm=norm, causal=causal, bias=bias, positions=positions, vocab=vocab,
                         tied=tied, parallel=parallel,
                         **{"kv-heads": kv_heads, "mlp-bias": mlp_bias, "mlp-kind": mlp_kind,
                            "rope-pairs": rope_pairs, "qk-norm": qk_norm,
                            "final-norm": final_norm})
        try:
            with time_limit(timeout):
                return hf_dim(hf_config, shrink, widths, keys, tokens, seed, device, as_json,
                              max_memory)
        except TimeLimitReached:
            print_stopped("dim", timeout, as_json, {"hf_config": hf_config, "shrink": shrink})
            raise typer.Exit(EXIT_AMBIGUOUS) from None
    if widths is None or keys is None:
        raise bad_value("widths", "given with --keys (or --hf-config CONFIG.json --shrink ...)",
                        widths, "Pass e.g. --widths 3,3,3 --keys 2,2.")
    arch = build_block_architecture(widths, keys, tokens, attention, temperature, heads=heads,
                                    values=values, residual=residual, mlp=mlp,
                                    activation=activation, norm=norm, causal=causal,
                                    kv_heads=kv_heads, bias=bias, mlp_bias=mlp_bias,
                                    mlp_kind=mlp_kind, positions=positions,
                                    rope_pairs=rope_pairs, vocab=vocab, tied=tied,
                                    qk_norm=qk_norm, final_norm=final_norm, parallel=parallel)
    if any(value != default for value, default in real.values()):
        from dataclasses import replace  # noqa: PLC0415

        arch = replace(arch, norm_bias=norm_bias, norm_eps=norm_eps, rope_base=rope_base,
                       out_bias=not no_out_bias, embed_scale=embed_scale,
                       post_norm=post_norm, embed_norm=embed_norm, token_types=token_types,
                       hidden_output=hidden_output, shared_norm=shared_norm,
                       qk_norm_shared=qk_norm_shared)
    progress = stderr_progress("dim")  # on stderr, so --json output stays clean
    from ..dimension.api import neuromanifold_dim  # noqa: PLC0415  (torch only when computing)

    try:
        with time_limit(timeout):
            result = neuromanifold_dim(arch, method=method.lower(), samples=samples, seed=seed,
                                       device=device, prime=prime, progress=progress,
                                       max_memory=max_memory, precision=precision,
                                       backend=backend, scheduler=scheduler, engine=engine)
    except TimeLimitReached as stop:
        print_stopped("dim", timeout, as_json, arch.to_dict(),
                      reason=stop.args[0] if stop.args else None)
        raise typer.Exit(EXIT_AMBIGUOUS) from None
    if as_json:
        print_json(result.to_dict())
    else:
        print(result.summary(text_width()))
    # A bare lower bound is what `--method exact` asks for; anywhere else it is not settled.
    done = ("settled", "certified") + (("lower-bound",) if method.lower() == "exact" else ())
    if result.status not in done:
        raise typer.Exit(EXIT_AMBIGUOUS)
