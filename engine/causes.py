"""Why an input is refused, as data: a code and its facts, which a front end words from its catalogue
(tinyllm_tui/tui/i18n.py, en and zh; the CLI prints its English). The stack's numerics word nothing.

`CODES` lists the stack's own codes, whose words the catalogue holds; a layer kind words its own codes in its
module (its CAUSES, en and zh: `breakpoint.expert` is the sparse FFN's), and a Cause of one carries them. A code
neither lists is a bug (KeyError), and the catalogue's tests check that each has its words in every language.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from engine import layers

# Why a file is refused, by the loader that reads it (engine/loading/*, engine/compare/*; worded in
# tinyllm_tui/tui/i18n_loading.py). A fact that needs words is itself a cause: `value.*` says what a file holds.
LOADING = frozenset({
    # what a YAML value is, as a refusal names it (engine/loading/document.py: _kind; a scalar shape: parameters.py)
    "value.nothing", "value.scalar", "value.boolean", "value.number", "value.text", "value.text_long", "value.mapping",
    "value.list", "value.other",
    # a YAML document and its values (engine/loading/document.py)
    "doc.unreadable", "doc.too_big", "doc.not_text", "doc.too_many_values", "doc.yaml_syntax", "doc.yaml_unclosed",
    "doc.yaml_opened", "doc.yaml_opened_context", "doc.yaml_character", "doc.yaml", "doc.duplicate_key", "doc.mapping",
    "doc.unknown_key",
    "doc.missing_key", "doc.list", "doc.number", "doc.finite", "doc.integer", "doc.integer_min", "doc.boolean",
    "doc.text", "doc.choice", "doc.tag", "doc.at", "doc.at_path", "doc.and", "doc.or",
    # a scenario file (engine/loading/scenario_file.py)
    "scenario.encoder_batch", "scenario.inline_and_checkpoint", "scenario.no_checkpoint", "scenario.not_checkpoint",
    "scenario.token_twice", "scenario.empty_vocab", "scenario.token_id_range", "scenario.unknown_token",
    "scenario.heads_divide", "scenario.max_positions", "scenario.kv_heads_divide", "scenario.rope_odd",
    "scenario.rope_positions", "scenario.rotary_dims", "scenario.bidirectional_window", "scenario.dropout_rate",
    "scenario.eps", "scenario.no_weight_file", "scenario.layer_entries", "scenario.tensor_shape",
    "scenario.identity_square", "scenario.shorthand", "scenario.no_requests", "scenario.no_prompt",
    "scenario.prompt_keys", "scenario.empty_request", "scenario.positions", "scenario.vectors_decoder",
    "scenario.text_needs_tokenizer", "scenario.cannot_encode", "scenario.chat_needs_template", "scenario.no_messages",
    "scenario.chat_token", "scenario.pad_token", "scenario.pad_short", "scenario.forbid_all", "scenario.positive",
    "scenario.probability", "scenario.no_layers", "scenario.layer_theta", "scenario.option_elsewhere",
    # a weight file: safetensors or npz (engine/loading/weightfile.py)
    "weightfile.suffix", "weightfile.missing", "weightfile.missing_more", "weightfile.extra", "weightfile.not_float",
    "weightfile.unreadable", "weightfile.header_length", "weightfile.header_big", "weightfile.header_cut",
    "weightfile.not_json_why", "weightfile.not_json", "weightfile.gap", "weightfile.gap_start", "weightfile.entry",
    "weightfile.dtype", "weightfile.shape", "weightfile.offsets", "weightfile.span", "weightfile.data_cut",
    "weightfile.twice", "weightfile.npz", "weightfile.name",
    # a checkpoint, and the options only a checkpoint takes (engine/loading/checkpoint.py, __init__.py)
    "checkpoint.only", "checkpoint.no_config", "checkpoint.internal", "checkpoint.positions",
    "checkpoint.prompts_and_ids", "checkpoint.prompt_or_ids", "checkpoint.prompt_tokenizer", "checkpoint.cannot_encode",
    "checkpoint.no_tokens", "checkpoint.chat_and", "checkpoint.chat_tokenizer", "checkpoint.budget",
    "checkpoint.layout", "checkpoint.not_float", "checkpoint.shape", "checkpoint.repeated_tokens",
    "checkpoint.tokenizer",
    # the memory a model's weights take (engine/loading/budget.py)
    "budget.tensors", "budget.scenario",
    # a scenario's cache: options (engine/loading/cache_options.py)
    "cacheopt.only_with", "cacheopt.quantized", "cacheopt.scale", "cacheopt.ring_window", "cacheopt.window",
    "cacheopt.bidirectional",
    # a Hugging Face folder: config.json, its shards and tensors (engine/loading/hf.py)
    "hf.not_object", "hf.no_text_config", "hf.text_config", "hf.text_model_type", "hf.architecture", "hf.special_token",
    "hf.not_json", "hf.layers_held", "hf.query_held", "hf.experts_held", "hf.missing", "hf.integer", "hf.too_big",
    "hf.eps", "hf.heads_divide", "hf.kv_heads_divide", "hf.silu", "hf.layer_types", "hf.layer_type", "hf.value_heads",
    "hf.qwen_bias", "hf.rotary_odd", "hf.conv_bias", "hf.layer_numbers", "hf.conv_layer_type", "hf.ffn_width",
    "hf.top_k", "hf.boolean", "hf.only", "hf.rope_interleave", "hf.groups_divide", "hf.topk_group", "hf.dense_layers",
    "hf.gelu", "hf.bidirectional", "hf.gemma_sliding", "hf.positive", "hf.attention_types", "hf.attention_type",
    "hf.partial_rope", "hf.rope_table", "hf.rope_theta", "hf.rope_scaling", "hf.freq_band", "hf.freq_equal",
    "hf.activation", "hf.only_flag", "hf.bert_positions", "hf.bert_decoder", "hf.no_weights", "hf.weight_map",
    "hf.shard_name", "hf.shard_missing", "hf.shard_tensor", "hf.tensor_missing", "hf.not_float", "hf.not_regular",
    # a GGUF file's layout, walked byte by byte (engine/loading/gguf_checks.py)
    "gguf.ends", "gguf.count", "gguf.nested", "gguf.item_type", "gguf.value_type", "gguf.unreadable", "gguf.magic",
    "gguf.version", "gguf.tensor_count", "gguf.dims", "gguf.ggml_type", "gguf.blocks", "gguf.extent",
    "gguf.items", "gguf.fields", "gguf.an_array", "gguf.alignment_type", "gguf.alignment",
    # a GGUF file's header and tensor table (engine/loading/gguf_file.py)
    "gguf.not_gguf", "gguf.unsupported_version", "gguf.key_twice", "gguf.tensor_twice", "gguf.offset_alignment",
    "gguf.header_cut", "gguf.unknown_value_type", "gguf.claims", "gguf.array_cut", "gguf.too_many_dims",
    "gguf.unknown_tensor_type", "gguf.rows_blocks", "gguf.past_end", "gguf.overlap",
    # a GGUF checkpoint's metadata and tensors (engine/loading/gguf_model.py)
    "gguf.architecture", "gguf.heads", "gguf.only", "gguf.top_k", "gguf.mtp", "gguf.value_heads", "gguf.recurrent",
    "gguf.rotary_dims", "gguf.kv_counts", "gguf.layer_counts", "gguf.conv_bias", "gguf.count_values",
    "gguf.rope_scaling", "gguf.positive", "gguf.freqs", "gguf.yarn_freqs", "gguf.layers_held", "gguf.query_held",
    "gguf.eps", "gguf.count_key", "gguf.above", "gguf.missing", "gguf.size_key", "gguf.tensor_missing",
    "gguf.dequantize", "gguf.experts_slices",
    # a checkpoint's tokenizer, from GGUF metadata (engine/loading/tokenizer.py)
    "tok.unsupported", "tok.cannot_build", "tok.no_tokens", "tok.tokens", "tok.per_token", "tok.token_id", "tok.pre",
    "tok.merges", "tok.scores",
    # a GGUF Gemma 4 checkpoint (engine/loading/gguf_gemma4.py)
    "gguf.gemma_moe", "gguf.sliding_partial_rope", "gguf.shared_kv", "gguf.per_layer", "gguf.full_freqs",
    # a GGUF DeepSeek checkpoint (engine/loading/gguf_deepseek.py)
    "gguf.mla_width", "gguf.deepseek_rope", "gguf.gating", "gguf.dense_layers", "gguf.groups_divide",
    # a chat template, and a conversation through it (engine/loading/chat.py)
    "chat.no_gguf_template", "chat.at_line", "chat.no_line", "chat.no_template", "chat.unreadable", "chat.not_json",
    "chat.not_object", "chat.syntax", "chat.refused", "chat.failed", "chat.no_messages", "chat.no_text",
    "chat.cannot_encode",
    # a Hugging Face Gemma 4 config (engine/loading/hf_gemma4.py)
    "hf.only_value", "hf.per_layer_vocab", "hf.gemma_attention_type", "hf.shared_layers", "hf.shared_kv",
    "hf.rope_type", "hf.fraction",
    # a Hugging Face checkpoint's quantization: gpt-oss's MXFP4 experts (engine/loading/hf_mxfp4.py)
    "hf.quant_method", "hf.packed_blocks", "hf.packed_scale_bytes", "hf.quant_unsupported", "hf.packed_rows",
    "hf.packed_scales", "hf.packed_entry",
    # an expect: table the run cannot be compared with (engine/compare/expect.py)
    "expect.request", "expect.in_prefill", "expect.in_decode", "expect.hook", "expect.round", "expect.head",
    "expect.layer", "expect.position", "expect.row_count", "expect.cells", "expect.ragged", "expect.tolerance",
    "expect.named_rows", "expect.named_columns",
    # an --against dump of activations (engine/compare/dump.py)
    "dump.suffix", "dump.unreadable", "dump.same_activation", "dump.not_numbers", "dump.name",
    # llama.cpp's own activations (engine/compare/llama_cpp.py)
    "llamacpp.missing", "llamacpp.cannot_load",
})

CODES = frozenset({
    # breakpoints (engine/breakpoints.py)
    "breakpoint.empty", "breakpoint.field", "breakpoint.part", "breakpoint.number", "breakpoint.phase",
    "breakpoint.whole",
    # weight edits (engine/loading/edits.py)
    "edit.number", "edit.finite", "edit.syntax", "edit.in_set", "edit.unknown", "edit.index", "edit.square",
    "edit.record",
    # interventions (engine/interventions.py)
    "intervention.syntax", "intervention.ablation", "intervention.empty_span", "intervention.index",
    "intervention.number", "intervention.row_end", "intervention.where", "intervention.layers",
    "intervention.name_head", "intervention.not_per_head", "intervention.heads", "intervention.requests",
    "intervention.no_operator",
    "intervention.no_operator.near", "intervention.row_width", "intervention.patch_rows",
    "intervention.patch_shape", "intervention.patch_pass", "intervention.expert_patch", "intervention.columns",
    # an expect: table that cannot be compared (engine/compare/expect.py), and which operator a table is about
    "expect.no_operator", "expect.rows", "expect.columns", "expect.table",
    # the parts a fact may name (a Cause as a fact): which span, which index of an intervention; which pass and
    # head a table names, or none
    "part.row", "part.column", "part.request", "part.from", "part.prefill", "part.decode", "part.head", "part.full",
    "part.none",
    # how a run's rows fail to meet the reference's in a diff (engine/compare/diff.py: OpDiff.mismatch)
    "diff.none", "diff.unmasked", "diff.shape", "diff.positions",
    # the first cell where a dump leaves the reference, by its labels, or why the arrays could not be compared
    # (engine/compare/against.py)
    "against.pattern", "against.head", "against.row", "against.channel", "against.kv", "against.shape",
    # what the other side of a comparison is, beside the reference: a dump, llama.cpp's tensors, another run
    "side.dump", "side.llama_cpp", "side.run", "side.cache", "side.run_cache",
    # readings of the residual stream (engine/analysis.py)
    "analysis.encoder", "analysis.post_norm", "analysis.block_norm",
    # why an injected bug cannot run on a scenario, or would change no number of it (engine/faults.py)
    "fault.encoder", "fault.past_positions", "fault.one_layer", "fault.mixed_layers", "fault.unpadded",
    "fault.not_left_padded", "fault.no_positions", "fault.no_per_layer_input",
    # an option the front ends refuse (tinyllm_tui/debugger/opening.py, standalone.py: OptionError)
    "option.bug", "option.form", "option.cannot_run", "option.system", "option.ids", "option.unwritable",
    "option.no_tables", "option.serve_relative",
    # a size (--max-memory: engine/loading/budget.py)
    "size.syntax",
    # an array backend or dtype this machine cannot use (engine/backend.py)
    "backend.unknown", "backend.dtype", "backend.missing", "backend.no_gpu",
    # a head the gradient check cannot take (engine/compare/gradcheck.py)
    "gradcheck.no_head", "gradcheck.not_softmax",
    # the line beside a K/V cache's rows: its layout's facts (engine/caches.py: RingFacts, PagedFacts, QuantizedFacts)
    "cache.ring", "cache.ring.sinks", "cache.paged", "cache.quantized", "cache.scale.per_head", "cache.scale.per_token",
    # the words inside a row's or a column's label (engine.labels.WORDS), where a cause names the cell
    "label.sink", "label.scale", "label.scale_head", "label.token_id",
}) | LOADING


@dataclass(frozen=True)
class Cause:
    """`code` names the case (`breakpoint.field`), `facts` its parts (a fact may be a Cause itself); `words`, for a
    layer kind's code, its kind's words per language (engine.layers.kind_words), which the catalogue lacks."""

    code: str
    facts: Mapping[str, object] = field(default_factory=dict)
    words: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self):
        if self.code not in CODES and not self.words:
            raise KeyError(f"no cause {self.code!r}: neither in engine.causes.CODES nor a layer kind's CAUSES")

    def format(self, **facts) -> Cause:
        """This cause with more facts: a cause stands where engine.labels formats a word (`scale h{head}`)."""
        return Cause(self.code, {**self.facts, **facts}, self.words)

    def __str__(self) -> str:
        """The code and its facts, not a sentence: a front end words it (tinyllm_tui.tui.i18n.cause_words)."""
        return f"{self.code}({', '.join(f'{name}={value!r}' for name, value in self.facts.items())})"


class CausedError(ValueError):
    """A refused input: `cause` says what, as a code and facts; `str(error)` is that cause, unworded."""

    def __init__(self, code: str, **facts):
        self.cause = cause(code, **facts)
        super().__init__(str(self.cause))


LABEL_WORDS = {"sink": Cause("label.sink"), "scale": Cause("label.scale"), "token_id": Cause("label.token_id"),
               "scale_head": Cause("label.scale_head", {"head": None})}  # engine.labels.WORDS as causes, which a
# front end words: engine.labels.pick formats the head into the last


def cause(code: str, **facts) -> Cause:
    """The Cause `code` with its facts, and its kind's words where a layer kind owns the code (its CAUSES)."""
    return Cause(code, facts, {} if code in CODES else layers.kind_words(code))
