"""The words of the interface: one message catalogue per language (English, Chinese with `--lang zh`).

Every text the views put on screen is a key here: `tr("status.step", "zh", step=3, last=40)`.
A key missing from a language falls back to English; a key missing from English is a bug (KeyError),
which the tests see. `cause_words(cause, lang)` words an engine cause (engine/causes.py: a code and facts);
tinyllm_tui.tui.result_words words a Debugger result. It imports nothing of the Debugger's, so that any view
(tinyllm_tui.presentation too) can word with it.
"""

from __future__ import annotations

from tinyllm_tui.tui import i18n_causes, i18n_loading

EN = {
    # bindings (the footer and the help screen)
    "Step": "Step", "Back": "Back", "Continue": "Continue", "Break": "Break", "Break on…": "Break on…",
    "Breakpoint list": "Breakpoint list", "Play": "Play", "Faster": "Faster", "Slower": "Slower",
    "Go to": "Go to", "Search back": "Search back", "Diff": "Diff", "Inject bug": "Inject bug",
    "Explanation": "Explanation", "KV cache": "KV cache", "Inputs": "Inputs", "Expectations": "Expectations",
    "Weights": "Weights", "Before/after edit": "Before/after edit",
    "Recompute stale cache": "Recompute stale cache", "Save weights": "Save weights", "Save as…": "Save as…",
    "Heat": "Heat", "Top-k sorted": "Top-k sorted", "Pieces": "Pieces", "Columns ←": "Columns ←", "Columns →": "Columns →",
    "Rows ↑": "Rows ↑", "Rows ↓": "Rows ↓", "Cancel run": "Cancel run", "Help": "Help", "Quit": "Quit",
    "Close": "Close", "Cancel": "Cancel", "Delete": "Delete", "Clear all": "Clear all", "Edit cell": "Edit cell",
    "Undo": "Undo", "Redo": "Redo", "Reset to file": "Reset to file", "Zero": "Zero", "Identity": "Identity",
    "Scale·I": "Scale·I", "Save": "Save", "Save as": "Save as", "Before/after": "Before/after",
    "Cancel loading": "Cancel loading", "Cancel or quit": "Cancel or quit",
    # panels
    "panel.explain": "Explain", "panel.cache": "KV cache", "panel.inputs": "Inputs", "panel.expect": "Expect",
    # the status line
    "status.step": "step {step}/{last}", "status.inject": "⚠ injected bug: {name}",
    "status.stale": "⚠ stale cache (r: recompute)", "status.unsaved": "{count} edited numbers unsaved", "status.unsaved.one": "{count} edited number unsaved",
    "status.breakpoints": "{count} breakpoints", "status.breakpoints.one": "{count} breakpoint", "status.playing": "▶ playing {speed}/s (+ -)",
    "status.hit": "⚑ breakpoint: {names}",
    "status.interventions": "✂ {count} interventions: {last}", "status.interventions.one": "✂ {count} intervention: {last}",
    "Logit lens": "Logit lens", "Heads at a glance": "Heads at a glance", "Patch/ablate…": "Patch/ablate…",
    "Save interventions": "Save interventions",
    "result.intervention.added": "intervention {text}", "result.intervention.undone": "undid the change of intervention {text}",
    "result.intervention.redone": "redid the change of intervention {text}",
    "result.unmasked": " · {count} masked cells now finite: {sees}",
    "result.unmasked.one": " · {count} masked cell now finite: {sees}",
    "result.unmasked.later": "position {position} sees later positions",
    "result.unmasked.window": "position {position} sees positions outside its window",
    "result.intervention.unreached": " · no token has been routed to expert {expert} of layer {layer} so far: it "
                                     "applies in the passes that route one there",
    "result.choice": " · chose {before} {p_before} → {after} {p_after}",
    "ask.intervene": "Patch or ablate, as --patch/--ablate take it (e.g. blocks.0.attn head 1):",
    "screen.intervening": "intervening, replaying to this step… (Esc cancels)",
    "screen.lens": "reading every residual stream through the unembedding…",
    "lens.title": "Logit lens · request {request} · {where} · ←/→ positions · ↑/↓ rows · Esc: close",
    "glance.title": "Attention at a glance · ←/→ head · ↑/↓ layer · Enter: open it · Esc: close",
    "glance.layer": "layer {layer} of 0–{last}", "glance.no_pattern": "layer {layer}: no attention pattern in this round yet",
    "glance.shown": "heads {first}–{last} of {heads} · last {rows} of {queries} queries, {cols} of {keys} keys",
    "lens.positions": "positions {first}–{last} of the pass's {total} (← →)", "lens.top": "top {k} at position {position}:",
    "lens.whole": "p: softmax of the whole vocabulary's logits (no decode filter or temperature)",
    "lens.attribution": "direct logit attribution: {token} (id {id}) at position {position}: logit {logit} = terms {terms}"
                        " + final norm bias {bias}",
    "lens.more": "  … {count} more",
    "Expert routing": "Expert routing",
    "routing.title": "Expert routing · ⚠ marks a margin < 1e-3 · ↑/↓ tokens · ←/→ experts · [ ] layer · a: every layer · "
                     "Esc: close",
    "routing.none": "no mixture-of-experts layer in this round",
    "routing.where": "layer {layer} · {positions} · e{first_expert}–e{last_expert} of {experts}",
    "routing.position": "position {first}", "routing.positions": "positions {first}–{last}",
    "routing.part": "{shown} ({count} of {tokens})",
    "routing.margin": "margin", "routing.tokens": "tokens", "routing.layer": "layer", "routing.least": "least margin",
    "routing.glance": "{count} sparse layers · experts {first}–{last} of {experts} · tokens per expert of the pass's "
                      "{tokens}",
    "routing.glance.one": "{count} sparse layer · experts {first}–{last} of {experts} · tokens per expert of the "
                          "pass's {tokens}",
    # results of moves
    "result.wrapped": "went to step {step} (wrapped around)", "result.went": "went to step {step}",
    "result.end": "end of trace · {results}", "result.generated": "request {request} generated {text} ({stop})",
    "result.nothing": "request {request} generated nothing ({stop})",
    "result.cancelled": "cancelled at step {step}", "result.breakpoint_added": "breakpoint on {text}",
    "breakpoint.misnamed": "no operator is named {name!r}",
    "breakpoint.misnamed.near": "no operator is named {name!r} (did you mean {near!r}?)",
    "breakpoint.misnamed.in": "breakpoint {text!r}: {why}",
    "result.breakpoint_removed": "removed breakpoint {text}", "result.breakpoints_cleared": "removed {count} breakpoints",
    "result.breakpoints_cleared.one": "removed {count} breakpoint",
    "result.inject": "now: {name}: {description}", "result.no_inject": "no injected bug",
    "result.inject.skipped": " · skipped {count} that cannot run here: {bugs}",
    "result.inject.bug": "{name}: {why}", "result.inject.between": "; ",
    "result.edited": "edited {name}", "result.restored": "restored {count} unsaved edits", "result.restored.one": "restored {count} unsaved edit",
    "result.undone": "undid the edit of {name}", "result.redone": "redid the edit of {name}",
    "result.recomputed": "recomputed the cache with the current weights", "result.saved": "saved to {path}",
    "result.cache": "KV cache: layer {layer} head {head}",
    "result.diverged": "first divergence: {where}",
    "result.diverged.values": "first divergence: {values} · at {where}", "result.agree": "your activations agree everywhere",
    # refusals
    "refused.busy": "busy: a run is in flight (Esc or ctrl+c cancels it)",
    "refused.first_step": "already at the first step",
    "refused.no_step": "no step {0}: the trace has steps 0–{1}", "refused.no_match": "no operator matches {0!r}",
    "refused.empty_search": "type a step number or an operator name, kind or condition",
    "refused.bad_query": "{0}", "refused.already_set": "breakpoint {0} is already set",
    "refused.no_breakpoint": "no breakpoint {0}", "refused.nothing_to_undo": "nothing to undo",
    "refused.nothing_to_redo": "nothing to redo", "refused.not_stale": "the cache is not stale",
    "refused.unchanged": "{0} unchanged", "refused.bad_edit": "{0}; the old value is kept",
    "refused.nothing_to_save": "nothing to save: the weights equal the file", "refused.no_cache": "no KV cache yet",
    "refused.no_dump": "no activations to compare: open with --against DUMP",
    "refused.no_lens": "no logit lens: {0}",
    # the main screen's own messages
    "screen.start": "start · n/→ step · c continue · ? help",
    "screen.listing": "computing round 0 (a key pressed now goes first) · n/→ step · ? help",
    "screen.running": "running… (Esc cancels)",
    "screen.running_at": "running… step {step} (Esc cancels)", "screen.cancelling": "cancelling…",
    "screen.dropped": "{count} keys dropped: pressed while {queue} already waited",
    "screen.dropped.one": "{count} key dropped: pressed while {queue} already waited",
    "screen.refused": "{count} keys refused: pressed while the run was in flight",
    "screen.refused.one": "{count} key refused: pressed while the run was in flight",
    "screen.idle": "nothing is running", "screen.paused": "paused", "screen.speed": "play speed {speed} steps/s",
    "screen.heat_on": "heat colouring on", "screen.heat_off": "heat colouring off",
    "screen.sorted_on": "columns sorted by the last position, most likely first",
    "screen.sorted_off": "columns in vocabulary order", "screen.not_vocab": "only a vocabulary row can be sorted",
    "screen.no_columns": "no more columns that way", "screen.no_rows": "no more rows that way",
    "screen.no_cache": "an encoder runs one pass over the whole input: it keeps no KV cache",
    "screen.no_action": "no action on {key!r}: press ? for the keys", "screen.diffing":
        "computing the full recompute to compare… (Esc cancels)", "screen.diff_cancelled": "diff cancelled",
    "screen.searching": "searching for {text}… (Esc cancels)", "screen.injecting":
        "switching the injected bug, replaying to this step… (Esc cancels)",
    "screen.undoing": "undoing, replaying to this step… (Esc cancels)",
    "screen.redoing": "redoing, replaying to this step… (Esc cancels)",
    "screen.recomputing": "recomputing the cache, replaying to this step… (Esc cancels)",
    "screen.applying": "applying {name}, replaying to this step… (Esc cancels)",
    "screen.restoring": "restoring the unsaved edits… (Esc cancels)",
    "screen.discarded": "discarded the unsaved edits of the earlier session",
    "screen.before": "showing values BEFORE the last edit", "screen.after": "showing current values",
    "screen.dump": "showing your dump's values (✓ ✗ as judged against the reference's)",
    "screen.saving": "saving to {path}…", "screen.saving_quit": "saving to {path}: quit once it is written",
    "screen.not_saved": "not saved: {error} ({path})", "screen.bad_path": "cannot write {text!r}: give a file name in an existing folder",
    # prompts and questions
    "ask.break": "Break on (glob, kind, field=value, nan, inf, abs>N, expert=E, route_margin<N; & combines):",
    "ask.goto": "Go to a step number, an operator (glob, short name), a kind or a condition (round=2, nan, abs>5, & combines):",
    "ask.search_back": "Search back for a step number, an operator (glob, short name), a kind or a condition (round=2, nan, abs>5, & combines):",
    "ask.value": "{where} = {old} → new value:", "ask.scale": "Set the matrix to s·I, s =",
    "ask.save_as": "Save the scenario with the edited weights as:",
    "ask.save_as.served": "Save the scenario with the edited weights as (a file name; your browser downloads it):",
    "screen.bad_name": "cannot write {text!r}: give a file name of letters, digits, '.', '_' and '-', without a folder",
    "ask.save": "Write {count} edited numbers into {path}?", "ask.save.one": "Write {count} edited number into {path}?",
    "ask.quit": "{count} edited numbers not saved.", "ask.quit.one": "{count} edited number not saved.",
    "ask.restore": "An earlier session left {count} unsaved weight edits ({written}) for this scenario.",
    "ask.restore.one": "An earlier session left {count} unsaved weight edit ({written}) for this scenario.",
    "ask.stale": "The KV cache was computed with the old weights. Recompute it, or keep the stale cache to see what it breaks?",
    "answer.save": "save", "answer.cancel": "cancel", "answer.save_quit": "save and quit",
    "answer.quit": "quit without saving", "answer.restore": "restore them", "answer.discard": "discard them",
    "answer.later": "decide later (keep them)", "answer.recompute": "recompute (default)",
    "answer.keep": "keep the stale cache", "answer.escape": "Esc: {answer}",
    # the help screen and the breakpoint list
    "help.keys": "Keys", "help.key": "key", "help.action": "action",
    "help.windows": "Matrix window: PgUp/PgDn or shift+↑/↓ rows, < > or shift+←/→ columns (the KV cache's too), "
                    "t sorts a vocabulary row's columns. KV cache: [ ] layer, { } head. "
                    "Tab moves focus between the operator list and the panels.",
    "help.mouse": "Mouse: click an operator in the list to go there; click a tab to switch panels.",
    "help.close": "Esc, q or ? closes this screen.",
    "help.breakpoints": "Breakpoints: where `continue` stops.\n\nA breakpoint is one or more conditions joined by `&`, "
                        "each one of:",
    "help.break_forms": ("`blocks.*.attn.hook_pattern`\tan operator name glob, or a short name as the TUI lists it "
                         "(`attn.pattern h1`, `ln_final.normalized`) or its first parts\n"
                         "`softmax`\tan operator kind: embed, positions, norm, linear, scores, softmax, mix, concat, "
                         "residual, activation, dropout, logits, filter, probs, choice\n"
                         "`phase=decode`, `round=1`, `request=0`, `layer=0`, `head=1`\twhere it runs\n"
                         "`nan`\tany NaN in the output\n"
                         "`inf`\tany ±∞ in the output, except the −∞ that masking puts into scores\n"
                         "`abs>5`\tmax |x| of the output above a threshold"),
    "breakpoints.title": "Breakpoints · d: delete · C: clear all · Esc: close", "breakpoints.none": "no breakpoints",
    "breakpoints.nothing": "no breakpoint to delete",
    # the matrix window
    "matrix.title": "{name}{head} · request {request} · {where}",
    "matrix.title.batch": "{name}{head} · requests {requests} (batch) · {where}", "matrix.head": " · head {head}",
    "matrix.empty": "{title} · {shape} · empty", "matrix.rows": "rows {first}–{last} of {count} (PgUp PgDn)",
    "matrix.cols": "cols {first}–{last} of {count} (< >)", "matrix.sorted": "top {count} by the last position (t)",
    "matrix.changed.edit": "{count} cells changed by the edit (•)",
    "matrix.changed.edit.one": "{count} cell changed by the edit (•)",
    "matrix.changed.intervention": "{count} cells changed by the intervention (•)",
    "matrix.changed.intervention.one": "{count} cell changed by the intervention (•)",
    "matrix.showing_before.edit": "BEFORE the edit (v)", "matrix.showing_before.intervention": "BEFORE the intervention (v)",
    "matrix.showing_dump": "YOUR DUMP's values (v)", "matrix.v_dump": "v: your dump's values",
    "matrix.v": "v: before", "matrix.chose": "chose {tokens}",
    "matrix.expect": "expect: {agree}/{count} printed cells agree (✓ ✗)",
    "matrix.dump": "your activations: {agree}/{count} cells within {tolerance} (✓ ✗)",
    "matrix.top": "{label} ▸ top {count}: {entries}",
    "matrix.range": "{label}: min {low} max {high} mean {mean} argmax {argmax}",
    "matrix.no_finite": "{label}: no finite value",
    "where.prefill": "prefill", "where.decode": "decode {round}",
    "label.slot": "s{slot}", "label.empty": "empty", "label.batch_row": "r{request}",
    # the KV cache
    "cache.none": "This model keeps no KV cache (no layer has run yet).",
    "cache.where": "KV · layer {layer} of 0–{last_layer} · head {head} of 0–{last_head}",
    "cache.rows": "{rows} rows, {new} new (+)", "cache.fed": "{rows} tokens fed, {new} new (+)", "cache.current": "from the current weights",
    "cache.stale": "⚠ stale: old weights, r recomputes",
    "cache.differ": "✗ {count} rows differ from your dump", "cache.differ.one": "✗ {count} row differs from your dump",
    "cause.cache.ring.sinks.one": "+{count} sink", "cache.no_positions": "none",  # the ring's line's (cause.cache.*)
    # the timeline
    "timeline.place": "request {request} (of {requests}) · {where}", "timeline.chunk": " · chunk {chunk}",
    "timeline.cache": " · cache {length}  ", "timeline.processed": "processed (K/V cached)", "timeline.processed.uncached": "processed",
    "timeline.current": "being fed", "timeline.selected": "selected, not yet fed", "timeline.pending": "pending",
    "timeline.no_round": "no round finished yet", "timeline.earlier": "‹ {count} earlier │ ",
    "timeline.round": "{where}: fed {fed} → cache {length}", "timeline.chose": " → chose {token}",
    "timeline.batch": "batch of {count}", "timeline.batch.rows": " · rows {first}–{last}", "timeline.pad": "pad",
    "timeline.chat": "chat:", "timeline.chat.tokens": "{tokens} tokens, {control} control",
    "timeline.chat.end": "ends at {token}", "timeline.control": "control token underlined",
    "matrix.batch": " (row {row}/{rows}, pad {pad})",
    # the operator list
    "group.input": "input", "group.layer": "layer {layer}", "group.output": "output",
    "group.decode_rule": "decode rule", "group.chunk": " · chunk {chunk}",
    # the lower panels
    "inputs.none": "This operator reads no array (it is computed from positions only).",
    "inputs.corner": " (corner {rows}×{cols})", "expect.checking": "Checking the expect: tables…",
    "expect.none": "This scenario has no expect: tables.", "expect.operator": "operator", "expect.agree": "agree",
    "expect.note": "printed in the text",
    "expect.summary": "{passed}/{tables} tables agree fully; {agreeing}/{cells} printed cells agree",
    # the diff dialog
    "diff.title": "Full recompute vs KV-cached run · Enter: go to the operator · Esc: close",
    "diff.injected": "injected bug {name}: {description}",
    "cli.invalid": "Invalid value for {option}: {why}", "cli.invalid_value": "Invalid value: {why}",
    "diff.flip": "⚠ first routing flip against the float64 exact-cache run: {where} · layer {layer} · token {token}: "
                 "reference chose {ours} (margin {margin}), {other} {theirs}",
    "diff.agrees": "✓ cached equals full recompute: every operator within {tolerance:g}",
    "diff.batch_agrees": "✓ the batch equals each request alone: every operator within the dtype's tolerance "
                         "({tolerance:g} in float64) + {steps}·(blocks passed + 1)·ε·max|value| (ε: the dtype's "
                         "rounding step; token ids exactly)",
    "diff.injected_mark": " (injected: {name})",
    "diff.first": "✗ first divergence: {where}", "diff.mark_first": "▶ first", "diff.request": "req {request}",
    "diff.from": "went to step {step} from the diff",
    "diff.at": "request {request} {phase} round {round} {name}{head} ({measured})", "diff.head": " head {head}",
    "diff.shape": "shape",
    "phase.prefill": "prefill", "phase.decode": "decode",
    # the weights browser
    "weights.in": "in {index}", "weights.out": "out {index}", "weights.value": "value",
    "weights.read_by": "read by: {readers}", "weights.no_reader": "no operator of this round",
    "weights.differ": "{count} cells differ from the file (•)", "weights.differ.one": "{count} cell differs from the file (•)",
    "quant.block": "{kind} block at {tensor}[{row}, {first}–{last}]", "quant.sub_block": " (sub-block {sub})",
    "quant.value": "value {index}{sub}: {scale} × code {code} {sign} {offset} = {value}",
    "quant.codes": "codes", "quant.values": "values", "quant.not_decoded": "(not decoded for {kind}: its values only)",
    # the loading screen
    "loading.file": "Loading {file}", "loading.reading": "reading the file", "loading.preparing": "preparing the debugger",
    "loading.yaml": "reading the YAML: {done} of {total}", "loading.tensors": "converting the weights: tensor {done} of {total}",
    "loading.hint": "Esc or ctrl+c cancels",
    # the deliberate bugs
    "inject.chunk-mask": "a cached chunk is masked with tril(ones(C, P+C)): new queries miss most of the cache",
    "inject.position-reset": "positions restart at 0 in every decode round",
    "inject.duplicate-append": "decode feeds the whole sequence again, so the prefix is appended to the cache twice",
    "inject.stale-cache": "decode reuses a prefix cache computed with other weights (every weight ×1.1)",
    "inject.no-cache-layer1": "layer 1 attends over layer 0's cache instead of its own",
    "inject.padding-unmasked": "left padding is not masked: every query also reads the PAD keys",
    "inject.positions-not-offset": "position ids count the left padding: a padded request's tokens sit too far right",
    "inject.rope-off-by-one": "decode rounds rotate the new token one position too far",
    "inject.gqa-modulo": "grouped-query attention: query head h reads kv head h % kv_heads instead of h // group",
    "inject.transposed-k": "K is stored transposed: each head's (T, dh) rows written as (dh, T)",
    "inject.ring-wrong-slot": "the ring buffer overwrites the slot after the oldest one when it wraps",
    "inject.block-table-wrong": "a new block's table entry points at the request's previous physical block",
    "inject.scale-per-tensor": "the quantization scale is taken per tensor instead of per head",
    "inject.conv-not-shifted": "a decode step writes its conv input over the window's newest row instead of shifting the window",
    "inject.conv-shifted-twice": "the conv window moves two rows per token: the input before the newest is lost (zeros)",
    "inject.state-not-decayed": "the recurrent decode does not decay the state (e^g) before the token writes",
    "inject.chunk-state-dropped": "the chunked delta rule starts every chunk after the first from a zero state",
    "inject.shared-kv-own-cache": "a KV-shared layer reads its own (empty) cache in cached rounds, not its source's",
    "inject.per-layer-previous": "a cached round reads the per-layer input row of the previous token",
    "inject.rope-key-unrotated": "latent attention caches its shared rope key before RoPE turns it",
    "inject.absorbed-uk-untransposed": "the absorbed latent attention multiplies the query by W_UK untransposed "
                                       "(its buffer read as if transposed)",
    # a --against report (tinyllm_tui/presentation/against_words.py: `check --against` prints the English)
    "report.summary": "{agree} of {rows} operators agree over {passes} passes",
    "report.flip": "first routing flip: {flip}", "report.first": "first divergence: {cell}",
    "report.none": "no divergence", "report.largest": "largest |Δ| {max_abs}: {where}",
    "report.missing": "not in the dump ({count}): {names}", "report.missing.passes": " ({count} passes)",
    "report.absent": "passes not in the dump ({count}): {items}",
    "report.beyond": "dump passes this run does not reach ({count}; more --max-new-tokens?): {items}",
    "report.unused": "dump keys that name no operator of this run ({count}): {items}",
    "report.bridge": "TransformerLens bridge keys, not compared ({count}): {items}",
    "report.row": "max |Δ| {max_abs}  ({dtype})",
    "report.values": "reference {ours}, dump {theirs} (|Δ| {delta} > {tolerance}, {dtype})",
    "report.tolerance": "{atol} + {rtol}·|ref|",
    "report.route_flip": "{where} · layer {layer} · token {token}: reference chose {ours} (scores {scores}, margin "
                         "{margin}), {other} {theirs}{their_scores}",
    "report.their_scores": " (scores {scores})",
}

ZH = {
    "Step": "单步", "Back": "后退", "Continue": "继续", "Break": "断点", "Break on…": "条件断点…",
    "Breakpoint list": "断点列表", "Play": "播放", "Faster": "加快", "Slower": "减慢",
    "Go to": "跳转", "Search back": "向前搜索", "Diff": "对比", "Inject bug": "注入错误",
    "Explanation": "解释", "KV cache": "KV缓存", "Inputs": "输入", "Expectations": "期望值",
    "Weights": "权重", "Before/after edit": "修改前/后",
    "Recompute stale cache": "重新计算过期缓存", "Save weights": "保存权重", "Save as…": "另存为…",
    "Heat": "热力着色", "Top-k sorted": "按概率排序", "Pieces": "词元片段", "Columns ←": "列 ←", "Columns →": "列 →",
    "Rows ↑": "行 ↑", "Rows ↓": "行 ↓", "Cancel run": "取消运行", "Help": "帮助", "Quit": "退出",
    "Close": "关闭", "Cancel": "取消", "Delete": "删除", "Clear all": "全部清除", "Edit cell": "编辑单元格",
    "Undo": "撤销", "Redo": "重做", "Reset to file": "恢复为文件值", "Zero": "置零", "Identity": "单位矩阵",
    "Scale·I": "s·I", "Save": "保存", "Save as": "另存为", "Before/after": "修改前/后",
    "Cancel loading": "取消加载", "Cancel or quit": "取消或退出",
    "panel.explain": "解释", "panel.cache": "KV缓存", "panel.inputs": "输入", "panel.expect": "期望值",
    "status.step": "步骤 {step}/{last}", "status.inject": "⚠ 注入的错误：{name}",
    "status.stale": "⚠ 缓存已过期（r：重新计算）", "status.unsaved": "{count} 个修改过的数尚未保存",
    "status.breakpoints": "{count} 个断点", "status.playing": "▶ 播放中 {speed}/秒 (+ -)",
    "status.hit": "⚑ 断点：{names}",
    "status.interventions": "✂ {count} 处激活干预：{last}",
    "Logit lens": "逻辑透镜", "Heads at a glance": "各头一览", "Patch/ablate…": "修补/消融…",
    "Save interventions": "保存干预",
    "result.intervention.added": "干预 {text}", "result.intervention.undone": "已撤销干预 {text} 的改动",
    "result.intervention.redone": "已重做干预 {text} 的改动",
    "result.unmasked": " · {count} 个被掩蔽（−∞）的单元格现为有限值：{sees}",
    "result.unmasked.later": "位置 {position} 能看到其后的位置",
    "result.unmasked.window": "位置 {position} 能看到窗口之外的位置",
    "result.intervention.unreached": " · 到目前为止没有Token被路由到第{layer}层的专家{expert}：它将在有Token路由到该专家的轮次生效",
    "result.choice": " · 选择 {before} {p_before} → {after} {p_after}",
    "ask.intervene": "修补或消融（写法同 --patch/--ablate，例如 blocks.0.attn head 1）：",
    "screen.intervening": "正在干预并重放到此步骤…（Esc 取消）",
    "screen.lens": "正在把每个残差流经过反嵌入读出…",
    "lens.title": "逻辑透镜 · 请求 {request} · {where} · ←/→ 位置 · ↑/↓ 行 · Esc 关闭",
    "glance.title": "各头一览 · ←/→ 头 · ↑/↓ 层 · Enter 打开 · Esc 关闭",
    "glance.layer": "第 {layer} 层（0–{last}）", "glance.no_pattern": "第 {layer} 层：本轮还没有注意力权重",
    "glance.shown": "第 {first}–{last} 头（共 {heads} 个）· 最后 {rows}/{queries} 个查询，{cols}/{keys} 个键",
    "lens.positions": "位置 {first}–{last}（本次前向共 {total} 个）（← →）", "lens.top": "位置 {position} 的前 {k} 名：",
    "lens.whole": "p：整个词表的逻辑值经 softmax 所得（未经解码规则的过滤与温度）",
    "lens.attribution": "直接逻辑归因：{token}（编号 {id}）位于位置 {position}：逻辑值 {logit} = 各项之和 {terms}"
                        " + 最终归一化偏置 {bias}",
    "lens.more": "  … 另有 {count} 项",
    "Expert routing": "专家路由",
    "routing.title": "专家路由 · ⚠ 标出差距 < 1e-3 · ↑/↓ Token · ←/→ 专家 · [ ] 层 · a 所有层 · Esc 关闭",
    "routing.none": "本轮没有混合专家层",
    "routing.where": "第 {layer} 层 · {positions} · 专家 {first_expert}–{last_expert}（共 {experts} 个）",
    "routing.position": "位置 {first}", "routing.positions": "位置 {first}–{last}",
    "routing.part": "{shown}（共 {tokens} 个中的 {count} 个）",
    "routing.margin": "差距", "routing.tokens": "Token数", "routing.layer": "层", "routing.least": "最小差距",
    "routing.glance": "{count} 个稀疏层 · 专家 {first}–{last}（共 {experts} 个）· 每个专家分到的Token数（本次前向共 "
                      "{tokens} 个）",
    "result.wrapped": "已跳转到步骤 {step}（已从头绕回）", "result.went": "已跳转到步骤 {step}",
    "result.end": "运行结束 · {results}", "result.generated": "请求 {request} 生成了 {text}（{stop}）",
    "result.nothing": "请求 {request} 没有生成内容（{stop}）",
    "result.cancelled": "已在步骤 {step} 取消", "result.breakpoint_added": "断点设于 {text}",
    "breakpoint.misnamed": "没有名为 {name!r} 的算子",
    "breakpoint.misnamed.near": "没有名为 {name!r} 的算子（是不是想写 {near!r}？）",
    "breakpoint.misnamed.in": "断点 {text!r}：{why}",
    "result.breakpoint_removed": "已删除断点 {text}", "result.breakpoints_cleared": "已删除 {count} 个断点",
    "result.inject": "现在：{name}：{description}", "result.no_inject": "没有注入错误",
    "result.inject.skipped": " · 跳过 {count} 个无法在此运行的错误：{bugs}",
    "result.inject.bug": "{name}：{why}", "result.inject.between": "；",
    "result.edited": "已修改 {name}", "result.restored": "已恢复 {count} 处未保存的修改",
    "result.undone": "已撤销对 {name} 的修改", "result.redone": "已重做对 {name} 的修改",
    "result.recomputed": "已用当前权重重新计算缓存", "result.saved": "已保存到 {path}",
    "result.cache": "KV缓存：第 {layer} 层 第 {head} 头",
    "result.diverged": "第一次出现差异：{where}", "result.diverged.values": "第一次出现差异：{values} · 位于 {where}", "result.agree": "你的激活值处处一致",
    "refused.busy": "忙：正在运行（Esc 或 ctrl+c 取消）", "refused.first_step": "已经是第一步",
    "refused.no_step": "没有步骤 {0}：运行共有步骤 0–{1}", "refused.no_match": "没有算子匹配 {0!r}",
    "refused.empty_search": "请输入步骤编号、算子名称、类型或条件",
    "refused.bad_query": "{0}", "refused.already_set": "断点 {0} 已存在",
    "refused.no_breakpoint": "没有断点 {0}", "refused.nothing_to_undo": "没有可撤销的修改",
    "refused.nothing_to_redo": "没有可重做的修改", "refused.not_stale": "缓存没有过期",
    "refused.unchanged": "{0} 没有变化", "refused.bad_edit": "{0}；保留原值",
    "refused.nothing_to_save": "无需保存：权重与文件相同", "refused.no_cache": "还没有KV缓存",
    "refused.no_dump": "没有可对比的激活值：请用 --against DUMP 打开",
    "refused.no_lens": "没有逻辑透镜：{0}",
    "screen.start": "开始 · n/→ 单步 · c 继续 · ? 帮助",
    "screen.listing": "正在计算第 0 轮（此时按的键优先）· n/→ 单步 · ? 帮助",
    "screen.running": "运行中…（Esc 取消）",
    "screen.running_at": "运行中… 步骤 {step}（Esc 取消）", "screen.cancelling": "正在取消…",
    "screen.dropped": "丢弃了 {count} 次按键：按下时已有 {queue} 次在等待",
    "screen.refused": "拒绝了 {count} 次按键：按下时运行尚未结束", "screen.idle": "没有正在运行的任务", "screen.paused": "已暂停", "screen.speed": "播放速度 {speed} 步/秒",
    "screen.heat_on": "热力着色：开", "screen.heat_off": "热力着色：关",
    "screen.sorted_on": "列按最后位置的概率从高到低排序", "screen.sorted_off": "列按词表顺序排列",
    "screen.not_vocab": "只有词表行可以排序",
    "screen.no_columns": "这个方向没有更多列了", "screen.no_rows": "这个方向没有更多行了",
    "screen.no_cache": "编码器对整个输入只运行一遍：它不保留KV缓存",
    "screen.no_action": "{key!r} 没有对应操作：按 ? 查看按键", "screen.diffing": "正在完整重算以便对比…（Esc 取消）",
    "screen.diff_cancelled": "对比已取消", "screen.searching": "正在搜索 {text}…（Esc 取消）",
    "screen.injecting": "正在切换注入的错误并重放到此步骤…（Esc 取消）",
    "screen.undoing": "正在撤销并重放到此步骤…（Esc 取消）", "screen.redoing": "正在重做并重放到此步骤…（Esc 取消）",
    "screen.recomputing": "正在重新计算缓存并重放到此步骤…（Esc 取消）",
    "screen.applying": "正在应用 {name} 并重放到此步骤…（Esc 取消）", "screen.restoring": "正在恢复未保存的修改…（Esc 取消）",
    "screen.discarded": "已丢弃上次会话未保存的修改",
    "screen.before": "显示上次修改之前的值", "screen.after": "显示当前值", "screen.dump": "显示你的转储中的值（✓ ✗ 为与参考值比较的结果）",
    "screen.saving": "正在保存到 {path}…", "screen.saving_quit": "正在保存到 {path}：写完后再退出",
    "screen.not_saved": "未保存：{error}（{path}）", "screen.bad_path": "无法写入 {text!r}：请给出已存在文件夹中的文件名",
    "ask.break": "在以下位置中断（通配符、类型、字段=值、nan、inf、abs>N、expert=E、route_margin<N；用&组合）：",
    "ask.goto": "跳转到步骤编号、算子（通配符或简称）、算子类型或条件（round=2、nan、abs>5，用&组合）：",
    "ask.search_back": "向前搜索步骤编号、算子（通配符或简称）、算子类型或条件（round=2、nan、abs>5，用&组合）：",
    "ask.value": "{where} = {old} → 新值：", "ask.scale": "把矩阵设为 s·I，s =",
    "ask.save_as": "把带有修改后权重的场景另存为：",
    "ask.save_as.served": "把带有修改后权重的场景另存为（文件名；浏览器会下载它）：",
    "screen.bad_name": "无法写入 {text!r}：请给出只含字母、数字、'.'、'_' 和 '-' 的文件名，不含文件夹",
    "ask.save": "把 {count} 个修改过的数写入 {path}？", "ask.quit": "{count} 个修改过的数尚未保存。",
    "ask.restore": "上次会话为此场景留下了 {count} 处未保存的权重修改（{written}）。",
    "ask.stale": "KV缓存是用旧权重计算的。重新计算，还是保留过期缓存看看它会破坏什么？",
    "answer.save": "保存", "answer.cancel": "取消", "answer.save_quit": "保存并退出",
    "answer.quit": "不保存直接退出", "answer.restore": "恢复", "answer.discard": "丢弃",
    "answer.later": "以后再决定（保留）", "answer.recompute": "重新计算（默认）",
    "answer.keep": "保留过期缓存", "answer.escape": "Esc：{answer}",
    "help.keys": "按键", "help.key": "按键", "help.action": "操作",
    "help.windows": "矩阵窗口：PgUp/PgDn 或 shift+↑/↓ 翻行，< > 或 shift+←/→ 翻列（KV缓存同样适用），"
                    "t 按概率排序词表行的列。KV缓存：[ ] 换层，{ } 换头。Tab 在算子列表和面板之间切换焦点。",
    "help.mouse": "鼠标：点击列表中的算子跳转到该处；点击标签切换面板。",
    "help.close": "Esc、q 或 ? 关闭本页。",
    "help.breakpoints": "断点：`continue` 停下的地方。\n\n一个断点由一个或多个以 `&` 连接的条件组成，每个条件是下列之一：",
    "help.break_forms": ("`blocks.*.attn.hook_pattern`\t算子名的通配模式，或算子列表中的短名"
                         "（`attn.pattern h1`、`ln_final.normalized`）或其开头几段\n"
                         "`softmax`\t一种算子：embed、positions、norm、linear、scores、softmax、mix、concat、residual、"
                         "activation、dropout、logits、filter、probs、choice\n"
                         "`phase=decode`、`round=1`、`request=0`、`layer=0`、`head=1`\t在哪里运行\n"
                         "`nan`\t输出中有 NaN\n"
                         "`inf`\t输出中有 ±∞（掩码放进 scores 的 −∞ 除外）\n"
                         "`abs>5`\t输出的 max |x| 超过阈值"),
    "breakpoints.title": "断点 · d：删除 · C：全部清除 · Esc：关闭", "breakpoints.none": "没有断点",
    "breakpoints.nothing": "没有可删除的断点",
    "matrix.title": "{name}{head} · 请求 {request} · {where}",
    "matrix.title.batch": "{name}{head} · 请求 {requests}（批次）· {where}", "matrix.head": " · 头 {head}",
    "matrix.empty": "{title} · {shape} · 空", "matrix.rows": "行 {first}–{last} / {count}（PgUp PgDn）",
    "matrix.cols": "列 {first}–{last} / {count}（< >）", "matrix.sorted": "按最后位置排序的前 {count} 项（t）",
    "matrix.changed.edit": "{count} 个单元格被修改改变（•）", "matrix.showing_before.edit": "修改之前（v）",
    "matrix.changed.intervention": "{count} 个单元格被干预改变（•）", "matrix.showing_before.intervention": "干预之前（v）",
    "matrix.showing_dump": "你的转储中的值（v）", "matrix.v_dump": "v：你的转储中的值",
    "matrix.v": "v：修改前", "matrix.chose": "选出 {tokens}",
    "matrix.expect": "期望值：{agree}/{count} 个印出的单元格一致（✓ ✗）",
    "matrix.dump": "你的激活值：{agree}/{count} 个单元格在 {tolerance} 之内（✓ ✗）",
    "matrix.top": "{label} ▸ 前 {count}：{entries}",
    "matrix.range": "{label}：最小 {low} 最大 {high} 平均 {mean} 最大处 {argmax}",
    "matrix.no_finite": "{label}：没有有限值",
    "where.prefill": "预填充", "where.decode": "解码 {round}",
    "label.slot": "槽{slot}", "label.empty": "空", "label.batch_row": "请求{request}",
    "cache.none": "此模型没有KV缓存（还没有层运行）。",
    "cache.where": "KV · 第 {layer} 层（0–{last_layer}）· 第 {head} 头（0–{last_head}）",
    "cache.rows": "{rows} 行，{new} 行新增（+）", "cache.fed": "已输入 {rows} 个Token，{new} 个新增（+）", "cache.current": "来自当前权重",
    "cache.stale": "⚠ 过期：旧权重，r 重新计算", "cache.differ": "✗ {count} 行与你的转储不同",
    "cache.no_positions": "无",
    "timeline.place": "请求 {request}（共 {requests}）· {where}", "timeline.chunk": " · 块 {chunk}",
    "timeline.cache": " · 缓存 {length}  ", "timeline.processed": "已处理（K/V已缓存）", "timeline.processed.uncached": "已处理",
    "timeline.current": "正在输入", "timeline.selected": "已选出，尚未输入", "timeline.pending": "待处理",
    "timeline.no_round": "尚无完成的轮次", "timeline.earlier": "‹ 前 {count} 轮 │ ",
    "timeline.round": "{where}：输入 {fed} → 缓存 {length}", "timeline.chose": " → 选出 {token}",
    "timeline.batch": "批次共 {count} 行", "timeline.batch.rows": " · 第 {first}–{last} 行", "timeline.pad": "填充",
    "timeline.chat": "对话：", "timeline.chat.tokens": "{tokens} 个词元，{control} 个控制词元",
    "timeline.chat.end": "止于 {token}", "timeline.control": "控制词元带下划线",
    "matrix.batch": "（第 {row}/{rows} 行，填充 {pad}）",
    "group.input": "输入", "group.layer": "层 {layer}", "group.output": "输出",
    "group.decode_rule": "解码规则", "group.chunk": " · 块 {chunk}",
    "inputs.none": "此算子不读取任何数组（只由位置计算）。", "inputs.corner": "（左上角 {rows}×{cols}）",
    "expect.checking": "正在核对 expect: 表…", "expect.none": "此场景没有 expect: 表。",
    "expect.operator": "算子", "expect.agree": "一致", "expect.note": "文中所印",
    "expect.summary": "{passed}/{tables} 张表完全一致；{agreeing}/{cells} 个印出的单元格一致",
    "diff.title": "完整重算 与 KV缓存运行 对比 · Enter：跳转到算子 · Esc：关闭",
    "diff.injected": "注入的错误 {name}：{description}",
    "cli.invalid": "{option} 的值无效：{why}", "cli.invalid_value": "值无效：{why}",
    "diff.flip": "⚠ 与float64精确缓存运行相比，首次路由翻转：{where} · 第{layer}层 · Token {token}：参考选择 {ours}"
                 "（差距 {margin}），{other} 选择 {theirs}",
    "diff.agrees": "✓ 缓存结果等于完整重算：每个算子都在 {tolerance:g} 之内",
    "diff.batch_agrees": "✓ 批次等于各请求单独运行：每个算子都在该数据类型的容差（float64 中为 {tolerance:g}）+ "
                         "{steps}·(经过的块数 + 1)·ε·max|值| 之内（ε：该数据类型的舍入步长；Token编号须完全相同）",
    "diff.injected_mark": "（注入：{name}）",
    "diff.first": "✗ 第一次出现差异：{where}", "diff.mark_first": "▶ 首处", "diff.request": "请求 {request}",
    "diff.from": "已从对比跳转到步骤 {step}",
    "diff.at": "请求 {request} {phase} 第 {round} 轮 {name}{head}（{measured}）", "diff.head": " 头 {head}", "diff.shape": "形状",
    "phase.prefill": "预填充", "phase.decode": "解码",
    "weights.in": "输入 {index}", "weights.out": "输出 {index}", "weights.value": "值",
    "weights.read_by": "读取者：{readers}", "weights.no_reader": "本轮没有算子读取",
    "weights.differ": "{count} 个单元格与文件不同（•）",
    "quant.block": "{kind} 块，位于 {tensor}[{row}, {first}–{last}]", "quant.sub_block": "（子块 {sub}）",
    "quant.value": "值 {index}{sub}：{scale} × 编码 {code} {sign} {offset} = {value}",
    "quant.codes": "编码", "quant.values": "值", "quant.not_decoded": "（{kind} 的编码未解码：只有值）",
    "loading.file": "正在加载 {file}", "loading.reading": "正在读取文件", "loading.preparing": "正在准备调试器",
    "loading.yaml": "正在读取 YAML：{done} / {total}", "loading.tensors": "正在转换权重：张量 {done} / {total}",
    "loading.hint": "Esc 或 ctrl+c 取消",
    "inject.chunk-mask": "缓存的块用 tril(ones(C, P+C)) 做掩码：新的查询看不到大部分缓存",
    "inject.position-reset": "每个解码轮次的位置都从 0 重新开始",
    "inject.duplicate-append": "解码时重新输入整个序列，前缀被重复追加到缓存",
    "inject.stale-cache": "解码沿用用其他权重（每个权重 ×1.1）计算的前缀缓存",
    "inject.no-cache-layer1": "第 1 层使用第 0 层的缓存而不是自己的",
    "inject.padding-unmasked": "左侧填充没有被掩码：每个查询也读到了 PAD 键",
    "inject.positions-not-offset": "位置编号把左侧填充也算进去：填充过的请求的词元位置偏右",
    "inject.rope-off-by-one": "解码轮次把新词元多旋转了一个位置",
    "inject.gqa-modulo": "分组查询注意力：查询头 h 读取 kv 头 h % kv_heads，而不是 h // group",
    "inject.transposed-k": "K 以转置方式存储：每个头的 (T, dh) 行被写成 (dh, T)",
    "inject.ring-wrong-slot": "环形缓冲区回绕时覆盖了最旧槽位之后的那一个",
    "inject.block-table-wrong": "新块的块表项指向本请求的前一个物理块",
    "inject.scale-per-tensor": "量化缩放按整个张量取，而不是按头",
    "inject.conv-not-shifted": "解码时卷积输入覆盖了窗口最新的一行，窗口没有移位",
    "inject.conv-shifted-twice": "卷积窗口每个词元移动两行：最新输入之前的那个输入丢失（变成 0）",
    "inject.state-not-decayed": "循环解码在Token写入前没有对状态做衰减（e^g）",
    "inject.chunk-state-dropped": "分块delta规则从第二块起每块都从零状态开始",
    "inject.shared-kv-own-cache": "KV共享层在缓存轮次读取自己（空的）缓存，而不是源层的缓存",
    "inject.per-layer-previous": "缓存轮次读取了前一个Token的每层输入行",
    "inject.rope-key-unrotated": "潜在注意力在RoPE旋转之前就缓存了共享的rope键",
    "inject.absorbed-uk-untransposed": "吸收形式的潜在注意力用未转置的W_UK乘查询（把其缓冲区当作已转置来读）",
    # --against 的报告
    "report.summary": "{rows} 个算子中有 {agree} 个一致，共 {passes} 次前向",
    "report.flip": "首次路由翻转：{flip}", "report.first": "第一次出现差异：{cell}",
    "report.none": "没有差异", "report.largest": "最大 |Δ| {max_abs}：{where}",
    "report.missing": "转储中没有（{count} 个）：{names}", "report.missing.passes": "（{count} 次前向）",
    "report.absent": "转储中没有的前向（{count} 次）：{items}",
    "report.beyond": "本次运行没有到达的转储前向（{count} 次；需要更多 --max-new-tokens？）：{items}",
    "report.unused": "不对应本次运行任何算子的转储键（{count} 个）：{items}",
    "report.bridge": "TransformerLens 桥接键，未比较（{count} 个）：{items}",
    "report.row": "max |Δ| {max_abs}（{dtype}）",
    "report.values": "参考 {ours}，转储 {theirs}（|Δ| {delta} > {tolerance}，{dtype}）",
    "report.tolerance": "{atol} + {rtol}·|参考|",
    "report.route_flip": "{where} · 第{layer}层 · Token {token}：参考选择 {ours}（分数 {scores}，差距 {margin}），"
                         "{other} 选择 {theirs}{their_scores}",
    "report.their_scores": "（分数 {scores}）",
}

# -- the engine's causes (engine/causes.py), worded in tinyllm_tui/tui/i18n_causes.py and, the loaders' refusals,
# i18n_loading.py: `cause.CODE` ----------------------------------------------------------------------------------
for part in (i18n_causes, i18n_loading):
    EN |= {f"cause.{code}": text for code, text in part.EN.items()}
    ZH |= {f"cause.{code}": text for code, text in part.ZH.items()}
EN |= {code: text for code, text in i18n_causes.EN.items() if code.startswith("label.")}  # in views' labels too
ZH |= {code: text for code, text in i18n_causes.ZH.items() if code.startswith("label.")}

CATALOGUES = {"en": EN, "zh": ZH}


def tr(key: str, lang: str, /, *args, **facts) -> str:
    """The text of `key` in `lang` with the facts filled in; English where `lang` lacks it.
    A count of one takes the `key.one` form where the language has one (English: "1 breakpoint")."""
    text = _text(key, lang, facts.get("count"))
    return text.format(*args, **facts) if args or facts else text


def _text(key: str, lang: str, count) -> str:
    """The words of `key` in `lang` before the facts are filled in, in the `key.one` form for a `count` of one."""
    catalogue = CATALOGUES.get(lang, EN)
    if count == 1 and f"{key}.one" in catalogue:
        key = f"{key}.one"
    return catalogue.get(key) or EN[key]


def cause_words(cause, lang: str) -> str:
    """An engine cause (engine.causes.Cause: a code and its facts) in words, the catalogue's or, for a layer kind's
    code, the words its kind gave it (English where it has none in `lang`); a fact that is a cause is worded too."""
    facts = {name: words(value, lang) for name, value in cause.facts.items()}
    if cause.words:
        return (cause.words.get(lang) or cause.words["en"]).format(**facts)
    return _text(f"cause.{cause.code}", lang, cause.facts.get("count")).format(**facts)  # formatted even without
    # facts: `{{` is a brace


def words(fact, lang: str):
    """A fact as a catalogue says it: a cause in words, anything else as it is (a number, a name, a text)."""
    return cause_words(fact, lang) if hasattr(fact, "code") and hasattr(fact, "facts") else fact


def where(phase: str, round_: int, lang: str) -> str:
    return tr("where.prefill", lang) if phase == "prefill" else tr("where.decode", lang, round=round_)
