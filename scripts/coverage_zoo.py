"""The models scripts/torch_coverage.py sweeps, each built from its name alone (so a fresh worker process can build
it): every torchvision classification, segmentation and video builder (``torchvision.models.list_models``) with
random weights, and every Hugging Face architecture in transformers' auto mapping that builds from a shrunken
default config with no download and takes ``input_ids`` or ``pixel_values``.

A case is the module (eval mode), its aotc input specs and feeds at two values of each dynamic dim. A model that
does not build or does not run eagerly at the sweep's sizes is a ``Skip`` (not counted against coverage: it says
nothing about aotc)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import numpy as np

from aotc import Dim, TensorSpec

BATCH = Dim("batch", min=1, max=8)
SEQ = Dim("seq", min=1, max=32)
HEIGHT = Dim("height", min=32, max=256, multiple_of=32)
WIDTH = Dim("width", min=32, max=256, multiple_of=32)
SUITES = ("torchvision", "hf")


class Skip(Exception):
    """The model does not build, or does not run eagerly at the sweep's sizes: not a result about aotc."""


@dataclass
class Case:
    module: Any
    inputs: dict[str, TensorSpec]
    feeds: list[dict[str, np.ndarray]]  # one per size: two values of each dynamic dim
    dims: str  # which dims are dynamic, for the table
    # The same inputs with seq static (batch still dynamic), for a model that specializes seq: the sweep declares
    # dynamic what the model allows, as a user would, and the table says which dims were dynamic.
    static_seq: Case | None = None


def with_mask(case: Case) -> Case | None:
    """The case with an all-ones ``attention_mask`` beside its ``input_ids``, for a model whose code builds no mask
    under torch.export when none is given (LongT5, Switch Transformers: ``if attention_mask is None and not
    is_torchdynamo_compiling()``); None where the model takes no mask or the case has one or no ids."""
    params = inspect.signature(case.module.forward).parameters
    if "attention_mask" not in params or "attention_mask" in case.inputs or "input_ids" not in case.inputs:
        return None
    masked = Case(
        case.module,
        {**case.inputs, "attention_mask": case.inputs["input_ids"]},
        [f | {"attention_mask": np.ones_like(f["input_ids"])} for f in case.feeds],
        case.dims,
    )
    masked.static_seq = None if case.static_seq is None else with_mask(case.static_seq)
    return masked


def torchvision():
    """torchvision, its ops' fake kernels skipped: the CUDA torchvision this machine's wheels give fails to register
    them beside the CPU torch (``operator torchvision::nms does not exist``), and no model swept here uses them."""
    import torch

    original = torch.library.register_fake
    torch.library.register_fake = lambda *args, **kwargs: lambda fn=None: fn
    try:
        import torchvision
    finally:
        torch.library.register_fake = original
    return torchvision


def names(suite: str) -> list[str]:
    if suite == "torchvision":
        tv = torchvision()
        out = []
        for module, kind in ((tv.models, "classification"), (tv.models.segmentation, "segmentation")):
            out += [f"{kind}/{n}" for n in tv.models.list_models(module=module)]
        out += [f"video/{n}" for n in tv.models.list_models(module=tv.models.video)]
        return out
    if suite == "hf":
        from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

        return [f"{t}/{c if isinstance(c, str) else c[0]}" for t, c in MODEL_MAPPING_NAMES.items()]
    raise ValueError(f"suite {suite!r}: expected one of {SUITES}")


def build(suite: str, name: str) -> Case:
    torch = __import__("torch")
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    with torch.no_grad():
        cases = [_torchvision(name, rng)] if suite == "torchvision" else _hf(name, rng)
        for case in cases:  # the first form of the model's inputs that eager torch runs
            try:
                case.module(**{k: torch.from_numpy(v) for k, v in case.feeds[0].items()})
                return case
            except Exception as e:  # any failure of eager torch is the model's, not aotc's
                failure = e
    raise Skip(f"eager torch fails at the sweep's sizes: {type(failure).__name__}: {_first_line(failure)}")


# -- torchvision ---------------------------------------------------------------------------------


def _torchvision(name: str, rng: np.random.Generator) -> Case:
    kind, model = name.split("/", 1)
    tv = torchvision()
    try:
        weights = tv.models.get_model_weights(model).DEFAULT
        least = weights.meta.get("min_size", (1, 1))
        frames = max(8, int(weights.meta.get("min_temporal_size", 1)))  # S3D needs 14, MViT 16
    except (ValueError, AttributeError, KeyError):
        least, frames = (1, 1), 8
    try:
        extra = {"weights_backbone": None} if kind == "segmentation" else {}  # no download of a backbone
        module = tv.models.get_model(model, weights=None, **extra).eval()
    except Exception as e:
        raise Skip(f"does not build: {type(e).__name__}: {_first_line(e)}") from None
    # A ViT takes only the image size it was built for: the builder's (vit_h_14: 224), not its pretrained
    # weights' min_size (518), which these random weights do not have.
    fixed = getattr(module, "image_size", None)
    side = fixed if isinstance(fixed, int) else max(64, *least)
    arg = next(iter(inspect.signature(module.forward).parameters))
    if kind == "segmentation":  # any image size: height and width dynamic
        spec = TensorSpec((BATCH, 3, HEIGHT, WIDTH))
        shapes = [(1, 3, 64, 96), (2, 3, 96, 64)]
        dims = "batch, height, width"
    elif kind == "video":
        spec = TensorSpec((BATCH, 3, frames, side, side))
        shapes = [(1, 3, frames, side, side), (3, 3, frames, side, side)]
        dims = "batch"
    else:
        spec = TensorSpec((BATCH, 3, side, side))
        shapes = [(1, 3, side, side), (3, 3, side, side)]
        dims = "batch"
    feeds = [{arg: rng.standard_normal(s).astype(np.float32)} for s in shapes]
    return Case(module, {arg: spec}, feeds, dims)


# -- Hugging Face ----------------------------------------------------------------------------------

# Shrunken sizes, set where a config has the field: 2 layers of width 32 with 2 heads.
_SMALL = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=2,
    intermediate_size=64,
    d_model=32,
    n_embd=32,
    n_layer=2,
    n_head=2,
    n_layers=2,
    n_heads=2,
    num_layers=2,
    num_heads=2,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=2,
    decoder_attention_heads=2,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    ffn_dim=64,
    d_ff=64,
    d_kv=16,
    head_dim=16,
    embed_dim=32,
    out_hidden_size=32,  # a vision tower's merger writes the text model's width (Qwen-VLs; a validator ties them)
    image_size=32,
    patch_size=8,
    num_channels=3,
    use_cache=False,
)
# Sizes by model type where a config's size is not one of ``_SMALL``'s names: VibeVoice's speech tokenizers (its
# audio tower and semantic encoder) double 32 filters over 6 stages of 3 to 8 blocks, 1.0B parameters in all.
_TYPE_SIZES = {
    "vibevoice_acoustic_tokenizer": dict(num_filters=4, depths=(1,) * 7),
    "vibevoice_acoustic_tokenizer_encoder": dict(num_filters=4, depths=(1,) * 7),
}
_TEXT_SIZES = ((2, 7), (3, 16))
# Layer counts ``_fitted`` tries where 2 is refused (Zamba's first 3 layers are fixed: its layer types need 3).
_DEEPER = {"num_hidden_layers": (3, 4, 6)}
# The most parameters a fitted config's model may keep (``_fitted``: one whose validators refused some sizes).
_FITTED_WEIGHTS = 50_000_000
_FITTED_LAYERS = 8  # and the most layers (Zamba2's 54 layer types are fixed; its export alone takes minutes)


def _hf(name: str, rng: np.random.Generator) -> list[Case]:
    """The model's cases, in the order tried: text and an image where it takes both (CLIP-likes need both), then
    text alone (a vision-language model whose prompt has no image tokens)."""
    torchvision()  # transformers imports torchvision when it is installed: without the patch no model class loads
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    model_type, cls_name = name.split("/", 1)
    try:
        config_cls, cls = CONFIG_MAPPING[model_type], getattr(transformers, cls_name)
        config, fitted = _config(config_cls)
        for part in (config, *_sub_configs(config)):  # a VLM's text model keeps its own use_cache
            part.use_cache = False  # past key values are not an output to compare
        module = cls(config).eval()
        if getattr(config, "_experts_implementation", None) is not None:
            # MoE experts as HF's batched_mm (each token's experts' weights gathered, then batched matmuls): the
            # same arithmetic as the default grouped_mm, which sorts tokens into data-dependent groups no
            # ahead-of-time graph can hold. It is the form HF offers for torch.export.
            config._experts_implementation = "batched_mm"
    except Exception as e:  # a config that does not shrink, a model class that needs a download
        raise Skip(f"does not build from a small config: {type(e).__name__}: {_first_line(e)}") from None
    _unzero(module, vanishing=model_type in _VANISHING)
    if fitted:  # its validators may have kept it big
        weights = sum(p.numel() for p in module.parameters())
        layers = getattr(config, "num_hidden_layers", 0) or 0
        if weights > _FITTED_WEIGHTS or layers > _FITTED_LAYERS:
            size = f"{weights / 1e6:.0f}M parameters" if weights > _FITTED_WEIGHTS else f"{layers} layers"
            raise Skip(f"does not build from a small config: {size} with the sizes it takes")
    main = getattr(module, "main_input_name", "input_ids")
    named = [p.name for p in inspect.signature(module.forward).parameters.values() if p.kind is not p.VAR_KEYWORD]
    if main not in named and "pixel_values" in named:  # a vision tower whose class keeps the text default
        main = "pixel_values"
    if main == "input_ids":
        vocab = int(getattr(config, "vocab_size", 128) or 128)
        ids = [rng.integers(0, min(vocab, 100), size=s).astype(np.int64) for s in _TEXT_SIZES]
        names = [main]
        # An encoder-decoder (T5, Marian, Blenderbot...) needs its decoder's ids too: the same tokens, which
        # every such model accepts (BART-likes would shift them in themselves).
        if "decoder_input_ids" in inspect.signature(module.forward).parameters:
            names.append("decoder_input_ids")
        seq = _TEXT_SIZES[0][1]
        fixed = [ids[0], rng.integers(0, min(vocab, 100), size=(_TEXT_SIZES[1][0], seq)).astype(np.int64)]
        feeds = [{n: x for n in names} for x in ids]
        text = Case(module, {n: TensorSpec((BATCH, SEQ), "int64") for n in names}, feeds, "batch, seq")
        text.static_seq = Case(
            module,
            {n: TensorSpec((BATCH, seq), "int64") for n in names},
            [{n: x for n in names} for x in fixed],
            "batch",
        )
        if "pixel_values" not in inspect.signature(module.forward).parameters:
            return [text]
        side, channels = _image(getattr(config, "vision_config", None) or config)
        image = TensorSpec((BATCH, channels, side, side))
        pixels = [rng.standard_normal((x.shape[0], channels, side, side)).astype(np.float32) for x in ids]
        both = Case(
            module,
            {**text.inputs, "pixel_values": image},
            [f | {"pixel_values": p} for f, p in zip(feeds, pixels)],
            "batch, seq",
        )
        both.static_seq = Case(
            module,
            {**text.static_seq.inputs, "pixel_values": image},
            [f | {"pixel_values": p} for f, p in zip(text.static_seq.feeds, pixels)],
            "batch",
        )
        return [both, text]
    if main == "pixel_values":
        # The config's image size first (a ViT's position embeddings fix it), then larger ones: a CNN that
        # downsamples by 32 (ConvNeXt) has nothing left of a 32-pixel image.
        own, channels = _image(config)
        cases = []
        for side in dict.fromkeys((own, 64, 128, 224)):
            shapes = [(1, channels, side, side), (3, channels, side, side)]
            feeds = [{main: rng.standard_normal(s).astype(np.float32)} for s in shapes]
            cases.append(Case(module, {main: TensorSpec((BATCH, channels, side, side))}, feeds, "batch"))
        return cases
    raise Skip(f"takes {main!r}, not input_ids or pixel_values")


def _sub_configs(config: Any) -> list[Any]:
    """The configs nested in ``config`` (text_config, vision_config, decoder...), any depth."""
    from transformers import PretrainedConfig

    out = []
    for value in vars(config).values():
        if isinstance(value, PretrainedConfig):
            out += [value, *_sub_configs(value)]
    return out


# Models whose HF init (convolutions of std 0.01, zero biases) shrinks the image layer by layer until only the
# biases are left: PP-DocLayout-V4's 120 convolutions leave 12 distinct scores among its 336 anchors, and the
# top-k over them picks among exact ties (torch's order among ties is its own, not an answer to compare). Their
# convolutions get std 2/sqrt(fan-in), which carries the image through (every score distinct), and their zero
# biases small random values, as trained weights have.
_VANISHING = frozenset({"pp_doclayout_v4"})


def _unzero(module: Any, vanishing: bool = False) -> None:
    """Weight matrices HF initializes to zero (MoE routers, residual gates) get small random values, as trained
    weights have: a zero router ties every expert, and which of tied experts ``topk`` returns is an implementation
    detail of torch (it is neither the first nor the last), not an answer to compare. ``vanishing``: see
    ``_VANISHING``."""
    import torch

    with torch.no_grad():
        for name, p in module.named_parameters():
            bias = vanishing and p.dim() == 1 and name.endswith("bias")
            if (p.dim() >= 2 or bias) and p.is_floating_point() and not p.any():
                p.normal_(0.0, 0.02)
        for conv in module.modules() if vanishing else ():
            if isinstance(conv, torch.nn.modules.conv._ConvNd):
                conv.weight.normal_(0.0, 2.0 / conv.weight[0].numel() ** 0.5)


def _image(config: Any) -> tuple[int, int]:
    """(side, channels) of the images a (vision) config takes."""
    side = getattr(config, "image_size", 32)
    return (side if isinstance(side, int) else 32), int(getattr(config, "num_channels", 3) or 3)


def _small(config_cls: Any, towers: bool = True, backbones: bool = True) -> dict[str, Any]:
    """The shrunken sizes ``config_cls`` takes, and its sub-configs' (a vision-language model's text and vision
    towers, BLT's patcher...) as dicts of theirs, so a composite model is small too; its AutoConfig towers too
    with ``towers``, and with ``backbones`` its transformer backbones (``_transformer_tower``)."""
    return _wanted(config_cls, lambda cls, base: {**base, **_small(cls, towers, backbones)}, towers, backbones)


def _wanted(config_cls: Any, shrink: Any, towers: bool = True, backbones: bool = False) -> dict[str, Any]:
    """``_SMALL``'s sizes that ``config_cls`` takes, and each sub-config's dict as ``shrink(class, defaults)``
    gives it."""
    from transformers import PretrainedConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    given = inspect.signature(config_cls.__init__).parameters
    out: dict[str, Any] = {k: v for k, v in _SMALL.items() if k in given}
    out |= _TYPE_SIZES.get(getattr(config_cls, "model_type", ""), {})
    specs = getattr(config_cls, "sub_configs_defaults", None) or {}
    for name, sub in (getattr(config_cls, "sub_configs", None) or {}).items():
        if name not in given or not isinstance(sub, type):
            continue
        if issubclass(sub, PretrainedConfig):
            out[name] = shrink(sub, {})
        elif towers and getattr(specs.get(name), "model_type", None) in CONFIG_MAPPING:
            # An AutoConfig tower (LLaVA's CLIP and Llama, PaliGemma's SigLIP and Gemma): its default model type
            # and the composite's defaults for it, shrunk. Left alone, they build the full 7B model. Backbones
            # keep their own list-shaped sizes (stage widths and depths), which _SMALL's scalars would break,
            # unless they are transformers sized by scalars (SAM3's 32-layer ViT at 1008 pixels).
            spec = specs[name]
            if name == "backbone_config" and not (backbones and _transformer_tower(CONFIG_MAPPING[spec.model_type])):
                continue
            tower = shrink(CONFIG_MAPPING[spec.model_type], dict(spec.init_kwargs))
            out[name] = {**tower, "model_type": spec.model_type}
    return out


def _transformer_tower(config_cls: Any) -> bool:
    """Whether a backbone's config is a transformer's, sized by scalars alone (a layer count and a width, no
    list among ``_SMALL``'s sizes it takes), which ``_SMALL`` shrinks as it does any tower."""
    defaults = {k: p.default for k, p in inspect.signature(config_cls.__init__).parameters.items() if k in _SMALL}
    sized = all(isinstance(defaults.get(k), int) for k in ("hidden_size", "num_hidden_layers"))
    return sized and not any(isinstance(v, list | tuple) for v in defaults.values())


def _config(config_cls: Any) -> tuple[Any, bool]:
    """``config_cls`` shrunk by ``_small``, then with its transformer backbones left as they are (LW-DETR's ViT
    names the layers it outputs), then with all its AutoConfig towers left as they are (Apertus-1.5's audio
    tower refuses the shrink), then where that fails its validators too (Swin's heads are a list per stage, Bamba's
    layer types must match its layer count) by ``_fitted``; and whether it was fitted."""
    for towers, backbones in ((True, True), (True, False), (False, False)):
        try:
            return config_cls(**_small(config_cls, towers, backbones)), False
        except Exception:  # a validator's refusal
            pass
    return config_cls(**_fitted(config_cls)), True


def _fitted(config_cls: Any, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """``base`` with as many of ``_small``'s sizes as ``config_cls`` accepts: each size is kept when the config
    still builds with it, in rounds until none more is taken (32 wide is refused while there are 12 heads, and
    taken once 2 heads are)."""
    wanted = _wanted(config_cls, _fitted)
    chosen = dict(base or {})
    taken = True
    while taken:
        taken = False
        for key, value in list(wanted.items()):
            for size in (value, *_DEEPER.get(key, ())):
                try:
                    config_cls(**{**chosen, key: size})
                except Exception:  # a validator's refusal: this size does not fit (yet)
                    continue
                chosen[key] = size
                del wanted[key]
                taken = True
                break
    return chosen


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:200] if text else ""
