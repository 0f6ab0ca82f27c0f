"""The words of the interface in English and Chinese (`--lang zh`).

English text is the key: `tr("Explain", "zh")` -> "解释"; text without a
translation stays English (numbers, operator names, file names).
"""

from __future__ import annotations

ZH = {
    # panels and titles
    "Explain": "解释", "KV cache": "KV缓存", "Inputs": "输入", "Expect": "期望值",
    "Keys": "按键", "key": "按键", "action": "操作",
    "Breakpoints": "断点", "Weights": "权重",
    # status line
    "step": "步骤", "breakpoint": "个断点", "breakpoints": "个断点", "playing": "播放中",
    "injected bug": "注入的错误", "stale cache (r: recompute)": "缓存已过期（r：重新计算）",
    "unsaved edit": "处未保存的修改", "unsaved edits": "处未保存的修改",
    "running…": "运行中…", "paused": "已暂停", "cancelled": "已取消",
    "start · n/→ step · c continue · ? help": "开始 · n/→ 单步 · c 继续 · ? 帮助",
    "already at the first step": "已经是第一步",
    # bindings
    "Step": "单步", "Back": "后退", "Continue": "继续", "Break": "断点", "Break on…": "条件断点…",
    "Breakpoint list": "断点列表", "Play": "播放", "Faster": "加快", "Slower": "减慢",
    "Search back": "向前搜索", "Diff": "对比", "Inject bug": "注入错误",
    "Explanation": "解释", "Expectations": "期望值", "Before/after edit": "修改前/后",
    "Recompute stale cache": "重新计算过期缓存", "Save weights": "保存权重", "Save as…": "另存为…",
    "Heat": "热力着色", "Columns ←": "列 ←", "Columns →": "列 →", "Rows ↑": "行 ↑", "Rows ↓": "行 ↓",
    "Cache layer": "缓存层", "Cache head": "缓存头", "Help": "帮助", "Quit": "退出",
    "Cancel run": "取消运行", "Undo edit": "撤销修改", "Redo edit": "重做修改",
    # help screen
    "Mouse: click an operator in the list to go there; click a tab to switch panels.":
        "鼠标：点击列表中的算子跳转到该处；点击标签切换面板。",
    "Esc, q or ? closes this screen.": "Esc、q 或 ? 关闭本页。",
    # timeline
    "processed (K/V cached)": "已处理（K/V已缓存）", "being fed": "正在输入", "selected, not yet fed": "已选出，尚未输入",
    "pending": "待处理", "no round finished yet": "尚无完成的轮次", "request": "请求", "cache": "缓存",
    "more": "个", "batch of": "批次共", "rows": "行", "pad": "填充",
    # prompts and headings
    "Go to": "跳转到", "Search back for": "向前搜索",
    " a step number, an operator (glob, short name), a kind or a condition (round=2, nan, abs>5, & combines):":
        "步骤编号、算子（通配符或简称）、算子类型或条件（round=2、nan、abs>5，用&组合）：",
    "Break on (glob, kind, field=value, nan, inf, abs>N; & combines):":
        "在以下位置中断（通配符、类型、字段=值、nan、inf、abs>N；用&组合）：",
    "input": "输入", "output": "输出", "decode rule": "解码规则", "layer": "层", "chunk": "块",
    "prefill": "预填充", "decode": "解码", "head": "头",
    "no action on": "无此按键", "press ? for the keys": "按 ? 查看按键",
    "breakpoint on": "断点设于", "removed breakpoint": "已删除断点", "went to": "已跳转到",
    "end of trace": "运行结束", "running…": "运行中…",
    # loading screen (its counts stay as the engine words them)
    "Loading": "正在加载", "reading the file": "正在读取文件", "preparing the debugger": "正在准备调试器",
    "Esc or ctrl+c cancels": "Esc 或 ctrl+c 取消", "cancelling…": "正在取消…",
}

TRANSLATIONS = {"zh": ZH}


def tr(text: str, lang: str) -> str:
    return TRANSLATIONS.get(lang, {}).get(text, text)
