"""Hypothesis strategies for random small scenarios (decoders with every model feature)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from engine.parameters import parameter_shapes
from engine.scenario import Scenario
from engine.spec import DecodeRule, FfnKind, ModelSpec, NormSpec, Positions, Request, Vocab

POSITION_SCHEMES = tuple(p for p in Positions if p is not Positions.ROPE)  # the terms added to the embedding


@st.composite
def model_specs(draw) -> ModelSpec:
    heads, d_head = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    norm = NormSpec(
        kind=draw(st.sampled_from(["layernorm", "rmsnorm", "none"])),
        placement=draw(st.sampled_from(["pre", "post"])),
        eps=1e-5,
        affine=draw(st.booleans()),
    )
    return ModelSpec(
        d_model=draw(st.integers(2, 5)),
        n_layers=draw(st.integers(1, 2)),
        n_heads=heads,
        d_head=d_head,
        d_ff=draw(st.integers(1, 6)),
        norm=norm,
        final_norm=draw(st.booleans()) and norm.kind != "none",
        ffn=draw(st.sampled_from(tuple(FfnKind))),
        positions=draw(st.sampled_from(POSITION_SCHEMES)),
        max_positions=32,  # room even for duplicate-append, which feeds the sequence again each round
        bias=draw(st.booleans()),
        tied_unembed=draw(st.booleans()),
    )


@st.composite
def scenarios(draw, *, sampled: bool = True) -> Scenario:
    model = draw(model_specs())
    vocab = Vocab(tuple(f"t{i}" for i in range(draw(st.integers(3, 7)))), pad=0, eos=1)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    # 1/√fan-in, as models are initialised, keeps activations O(1) even without normalisation,
    # so that 1e-10 is a meaningful bound on |cached − full|.
    weights = {name: rng.normal(0.0, 1.0 / np.sqrt(shape[0]), shape)
               for name, shape in parameter_shapes(model, len(vocab)).items()}
    token = st.integers(0, len(vocab) - 1)
    requests = tuple(
        Request(tokens=tuple(draw(st.lists(token, min_size=1, max_size=5))), max_new_tokens=draw(st.integers(1, 4)))
        for _ in range(draw(st.integers(1, 2)))
    )
    decode = DecodeRule(
        rule=draw(st.sampled_from(["greedy", "sample"])) if sampled else "greedy",
        forbid=(0,),
        stop_at_eos=draw(st.booleans()),
        temperature=draw(st.sampled_from([0.7, 1.0, 1.5])),
        top_k=draw(st.sampled_from([None, 2, 3])),
        top_p=draw(st.sampled_from([None, 0.8])),
        seed=draw(st.integers(0, 100)),
        prefill_chunk=draw(st.sampled_from([None, 1, 2, 3])),
    )
    return Scenario("<random>", "random", vocab, model, weights, requests, decode)
