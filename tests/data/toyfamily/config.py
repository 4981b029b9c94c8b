"""The toy family's model: :class:`ToySpec` and its config.json reader (the ``config`` hook's module)."""
from dataclasses import dataclass
from toyfamily import FAMILY


@dataclass(frozen=True)
class ToySpec:
    """A toy model in its config's dimensions (``FAMILY.dimensions``) and whether its head is tied."""

    name: str
    h: int
    h_F: int
    l: int
    n_h: int
    n_kv: int
    d_h: int
    v: int
    tie_word_embeddings: bool = False
    source: str = "preset"
    family = FAMILY.name

    @property
    def structure(self):
        return (self.tie_word_embeddings,)

    def layer_kinds(self):
        return ["dense"] * self.l

    def named(self):
        return {k: getattr(self, k) for k in ("h", "h_F", "l", "n_h", "n_kv", "d_h", "v")}


def shape_name(model_type, dims):
    return f"{model_type} (h {dims['h']}, {dims['l']} layers)"


def from_fields(f, name=None, source=None):
    dims = {attr: f.int(field, meaning) for field, attr, meaning in FAMILY.dimensions}
    if dims["n_h"] % dims["n_kv"]:
        raise f.err("num_key_value_heads", "num_key_value_heads must divide num_attention_heads")
    tied = f.data.get("tie_word_embeddings", False)
    return ToySpec(name=name or shape_name(f.data["model_type"], dims), tie_word_embeddings=tied,
                   source=str(f.path) if source is None else source, **dims)


def fields_of(spec):
    return {"model_type": "toy_gqa", "tie_word_embeddings": spec.tie_word_embeddings,
            **{field: getattr(spec, attr) for field, attr, _ in FAMILY.dimensions}}
