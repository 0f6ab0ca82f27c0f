"""A Debugger result in words (tinyllm_tui.debugger.results): `describe(result, lang)`, from the catalogue
(tinyllm_tui.tui.i18n); "" for a plain move, which the screen itself shows."""

from __future__ import annotations

from tinyllm_tui.debugger.interventions import Intervened, Unmasked
from tinyllm_tui.debugger.results import (BreakpointAdded, BreakpointRemoved, BreakpointsCleared, CacheShown,
                                          Cancelled, Diverged, EndOfTrace, HitBreakpoint, InjectionChanged, Misnamed,
                                          Moved, Rebuilt, Refused, Result, Saved)
from tinyllm_tui.presentation.against_words import place_words, values_words
from tinyllm_tui.tui.i18n import tr, words


def generated(text: str, pieces: tuple[str, ...], as_pieces: bool) -> str:
    """Generated text decoded ('Echo'), or its pieces, one per token ('E|cho'); quoted so that spaces at its
    ends show (the pieces are display text already: a newline is written \\n, never repeated by repr)."""
    return f"'{'|'.join(pieces) if as_pieces else text}'"


def choice_words(choice, lang: str) -> str:
    """` · chose ' Paris' 0.773 → ' Paris' 0.141`: a round's chosen token and its probability before → after."""
    if choice is None:
        return ""
    (before, p_before), (after, p_after) = choice
    return tr("result.choice", lang, before=repr(before), after=repr(after), p_before=f"{p_before:.3f}",
              p_after=f"{p_after:.3f}")


def unmasked_words(unmasked: Unmasked | None, lang: str) -> str:
    """` · 3 masked cells now finite: position 0 sees later positions`: what a patch of scores did to the mask."""
    if unmasked is None:
        return ""
    sees = tr("result.unmasked.later" if unmasked.later else "result.unmasked.window", lang,
              position=unmasked.position)
    return tr("result.unmasked", lang, count=unmasked.cells, sees=sees)


def misnamed_words(misnamed: Misnamed, lang: str, *, named: bool = True) -> str:
    """`breakpoint 'attn.patern': no operator is named 'attn.patern' (did you mean 'attn.pattern'?)`; without
    `named`, from `no operator` on (the breakpoint said already)."""
    why = tr("breakpoint.misnamed.near" if misnamed.near else "breakpoint.misnamed", lang, name=misnamed.name,
             near=misnamed.near)
    return tr("breakpoint.misnamed.in", lang, text=misnamed.text, why=why) if named else why


def describe(result: Result, lang: str, *, pieces: bool = False) -> str:
    """A Debugger result in words ("" for a plain move: the screen itself shows where it is).
    Args: pieces: generated text as its tokens' pieces instead of decoded."""
    match result:
        case Moved(step=step, wrapped=True):
            return tr("result.wrapped", lang, step=step)
        case Moved() | HitBreakpoint():
            return ""  # the status line shows the step and the breakpoints that hit it
        case EndOfTrace(results=results):
            return tr("result.end", lang, results="; ".join(
                tr("result.generated", lang, request=i, text=generated(r.text, r.pieces, pieces), stop=r.stop)
                if r.pieces
                else tr("result.nothing", lang, request=i, stop=r.stop) for i, r in enumerate(results)))
        case Cancelled(step=step):
            return tr("result.cancelled", lang, step=step)
        case Refused(reason=reason, args=args):
            return tr(f"refused.{reason}", lang, *(words(arg, lang) for arg in args))
        case BreakpointAdded(text=text, misnamed=()):
            return tr("result.breakpoint_added", lang, text=text)
        case BreakpointAdded(text=text, misnamed=misnamed):  # and what it names that runs nowhere
            return " · ".join([tr("result.breakpoint_added", lang, text=text),
                               *(misnamed_words(m, lang, named=False) for m in misnamed)])
        case BreakpointRemoved(text=text):
            return tr("result.breakpoint_removed", lang, text=text)
        case BreakpointsCleared(count=count):
            return tr("result.breakpoints_cleared", lang, count=count)
        case InjectionChanged(name=name, skipped=skipped):
            now = (tr("result.no_inject", lang) if name is None else
                   tr("result.inject", lang, name=name, description=tr(f"inject.{name}", lang)))
            if not skipped:
                return now
            bugs = tr("result.inject.between", lang).join(tr("result.inject.bug", lang, name=bug, why=words(why, lang))
                                                   for bug, why in skipped)
            return now + tr("result.inject.skipped", lang, count=len(skipped), bugs=bugs)
        case Intervened(change=change, text=text, choice=choice, unreached=unreached, unmasked=unmasked):
            pending = "" if unreached is None else tr("result.intervention.unreached", lang, layer=unreached[0],
                                                      expert=unreached[1])
            return (tr(f"result.intervention.{change}", lang, text=text) + pending + unmasked_words(unmasked, lang)
                    + choice_words(choice, lang))
        case Rebuilt(kind=kind, name=name, count=count):
            return tr(f"result.{kind}", lang, name=name, count=count)
        case Saved(path=path):
            return tr("result.saved", lang, path=path)
        case Diverged(step=None):
            return tr("result.agree", lang)
        case Diverged(first=first, requests=requests) if first.index is None:  # the arrays do not even fit
            return tr("result.diverged", lang, where=place_words(first, requests, lang))
        case Diverged(first=first, requests=requests):
            return tr("result.diverged.values", lang, where=place_words(first, requests, lang),
                      values=values_words(first, lang))
        case CacheShown(layer=layer, head=head):
            return tr("result.cache", lang, layer=layer, head=head)
    raise TypeError(f"no words for {result!r}")
