"""Math answers: ``\\boxed{}`` extraction and a Minerva-style normaliser (Replay App. A, "Verifier").

Pure string functions, no third-party imports; every function is total (never raises on odd
input) and runs in time linear-ish in the input length (the only regexes have no nested
quantifiers), but callers still run them under a deadline (:mod:`llm_harness.tasks.isolation`).

Extraction (:func:`extract_boxed`): the last ``\\boxed`` or ``\\fbox`` in the last ``window``
(default 500) characters; its argument is either a brace group (balanced, with ``\\{``/``\\}``
escapes not counted) or, for ``\\boxed 5``, the run of characters up to the next whitespace or
``$``.  Unbalanced braces or an empty argument are MALFORMED; no box is MISSING.

Normalisation (:func:`normalize_answer`), in order:

1. unwrap a whole-answer ``\\boxed{..}``/``\\fbox{..}``; drop ``$``, ``\\(``, ``\\)``, ``\\[``,
   ``\\]`` delimiters and ``\\displaystyle``;
2. keep the text after the last top-level ``=`` unless the answer contains a top-level comma
   (``x = 5`` -> ``5``; ``x=1, y=2`` is kept whole);
3. ``\\dfrac``/``\\tfrac`` -> ``\\frac``; ``\\mbox`` -> ``\\text``; drop ``\\left``/``\\right``
   (and a ``\\left.``/``\\right.`` placeholder), thin spaces ``\\!`` ``\\,`` ``\\;`` ``\\:`` ``\\ ``
   and ``~``;
4. drop degree marks (``^\\circ``, ``^{\\circ}``, ``\\circ``, ``\\degree``, ``°``), percent
   signs (``\\%``, ``%``) and dollar signs (``\\$``);
5. drop ``\\text{<unit>}`` groups (and a following ``^2``/``^3``) whose content is a unit or
   counting word (:data:`UNIT_WORDS`), then unwrap the remaining ``\\text``, ``\\textbf``,
   ``\\textit``, ``\\mathrm``, ``\\mathbf`` groups to their content; drop trailing plain unit
   words of two or more letters after a number (``12 inches`` -> ``12``);
6. remove all whitespace; strip trailing ``.`` and a trailing ``\\\\``;
7. expand shorthand ``\\frac12`` -> ``\\frac{1}{2}``, ``\\sqrt2`` -> ``\\sqrt{2}``;
8. remove thousands separators (``1,000`` / ``1{,}000`` -> ``1000``) only when the commas sit
   in thousands positions, so tuples like ``1,2`` survive (Minerva removes every comma of a
   digit string, which would turn ``1,2`` into ``12``: a documented departure);
9. add a leading zero to bare decimals (``.5`` -> ``0.5``).

Equal normalised strings are the training reward's definition of a correct answer (exact match;
``0.5`` and ``\\frac{1}{2}`` differ, and that is by design: the evaluation grader is math-verify).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "BOXED_WINDOW",
    "UNIT_WORDS",
    "BoxedAnswer",
    "extract_boxed",
    "find_group",
    "normalize_answer",
]

#: Characters at the end of a completion searched for the final box (Replay paper: 500).
BOXED_WINDOW = 500

#: Unit and counting words removed by the normaliser (inside ``\text{}`` always; as trailing
#: plain words only when two or more letters long and preceded by a number).
UNIT_WORDS = frozenset(
    """
    unit units sq square squared cubic degree degrees radian radians cm centimeter centimeters
    centimetre centimetres m meter meters metre metres km kilometer kilometers mm millimeter
    millimeters in inch inches ft foot feet yd yard yards mi mile miles mph kph hour hours hr hrs
    minute minutes min mins second seconds sec secs s day days week weeks month months year years
    dollar dollars cent cents pound pounds lb lbs ounce ounces oz gallon gallons liter liters
    litre litres ml g gram grams kg kilogram kilograms mg ton tons student students people
    person persons way ways point points digit digits integer integers number numbers time times
    edge edges meal meals page pages book books apple apples marble marbles child children
    """.split()
)

_BOX_COMMANDS = ("\\boxed", "\\fbox")


@dataclass(frozen=True)
class BoxedAnswer:
    """Result of :func:`extract_boxed`: ``status`` is ``"ok"``, ``"missing"`` or ``"malformed"``."""

    status: str
    """``"ok"``, ``"missing"`` or ``"malformed"``."""
    content: str | None
    """The box's argument (stripped) when ``status == "ok"``, else ``None``."""


def find_group(text: str, open_idx: int) -> int:
    """Index one past the ``}`` closing the ``{`` at ``text[open_idx]``, or ``-1`` if unbalanced.

    A backslash escapes the next character, so ``\\{`` and ``\\}`` do not count.
    """
    depth = 0
    i = open_idx
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return -1


def _last_box_start(tail: str) -> tuple[int, int]:
    """``(index, length)`` of the last box command in ``tail`` not followed by a letter."""
    best = (-1, 0)
    for cmd in _BOX_COMMANDS:
        j = len(tail)
        while True:
            j = tail.rfind(cmd, 0, j)
            if j < 0:
                break
            nxt = tail[j + len(cmd) : j + len(cmd) + 1]
            if not nxt.isalpha():  # \boxed, not \boxedx
                if j > best[0]:
                    best = (j, len(cmd))
                break
            j += len(cmd) - 1
            if j <= 0:
                break
    return best


def extract_boxed(text: str, window: int = BOXED_WINDOW) -> BoxedAnswer:
    """The argument of the last ``\\boxed``/``\\fbox`` in the last ``window`` characters."""
    if not isinstance(text, str):
        return BoxedAnswer("missing", None)
    tail = text[-window:] if window > 0 else text
    start, length = _last_box_start(tail)
    if start < 0:
        return BoxedAnswer("missing", None)
    i = start + length
    while i < len(tail) and tail[i] in " \t":
        i += 1
    if i < len(tail) and tail[i] == "{":
        end = find_group(tail, i)
        if end < 0:
            return BoxedAnswer("malformed", None)
        content = tail[i + 1 : end - 1].strip()
    elif i > start + length:  # "\boxed 5": one space-delimited token
        m = re.match(r"[^\s$]+", tail[i:])
        content = m.group(0) if m else ""
    else:
        return BoxedAnswer("malformed", None)
    if not content:
        return BoxedAnswer("malformed", None)
    return BoxedAnswer("ok", content)


# ---------------------------------------------------------------------------- normaliser
def _replace_groups(s: str, command: str, repl) -> str:
    """Replace every ``command{arg}`` (balanced) by ``repl(arg, rest_after)``'s text.

    ``repl`` returns ``(replacement, n_extra)`` where ``n_extra`` characters after the group are
    also consumed.  Unbalanced groups are left alone.
    """
    out = []
    i = 0
    while True:
        j = s.find(command, i)
        if j < 0:
            out.append(s[i:])
            break
        k = j + len(command)
        if k < len(s) and s[k].isalpha():  # a longer command name, e.g. \textbf for \text
            out.append(s[i:k])
            i = k
            continue
        while k < len(s) and s[k] == " ":
            k += 1
        if k >= len(s) or s[k] != "{":
            out.append(s[i:k])
            i = k
            continue
        end = find_group(s, k)
        if end < 0:
            out.append(s[i:])
            break
        text, extra = repl(s[k + 1 : end - 1], s[end:])
        out.append(s[i:j])
        out.append(text)
        i = end + extra
    return "".join(out)


def _top_level_positions(s: str, ch: str) -> list[int]:
    depth = 0
    out = []
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\":
            i += 2
            continue
        if c in "{([":
            depth += 1
        elif c in "})]":
            depth = max(0, depth - 1)
        elif c == ch and depth == 0:
            out.append(i)
        i += 1
    return out


def _unwrap_box(s: str) -> str:
    for cmd in _BOX_COMMANDS:
        if s.startswith(cmd):
            k = len(cmd)
            while k < len(s) and s[k] == " ":
                k += 1
            if k < len(s) and s[k] == "{" and find_group(s, k) == len(s):
                return s[k + 1 : -1].strip()
    return s


def _drop_unit_text(arg: str, rest: str) -> tuple[str, int]:
    words = re.sub(r"[^A-Za-z]+", " ", arg).split()
    if arg.strip() == "" or (words and all(w.lower() in UNIT_WORDS for w in words) and not re.search(r"\d", arg)):
        m = re.match(r"\s*\^\s*\{?\s*[23]\s*\}?", rest)
        return "", (m.end() if m else 0)
    return "\\text{" + arg + "}", 0


def _expand_shorthand(s: str, command: str, n_args: int) -> str:
    """``\\frac12`` -> ``\\frac{1}{2}``; ``\\sqrt2`` -> ``\\sqrt{2}`` (single-character args)."""
    out = []
    i = 0
    while True:
        j = s.find(command, i)
        if j < 0:
            out.append(s[i:])
            return "".join(out)
        k = j + len(command)
        if k < len(s) and s[k].isalpha():
            out.append(s[i:k])
            i = k
            continue
        out.append(s[i:k])
        if command == "\\sqrt" and k < len(s) and s[k] == "[":  # \sqrt[3]{x}: keep the index
            close = s.find("]", k)
            if close < 0:
                i = k
                continue
            out.append(s[k : close + 1])
            k = close + 1
        args = []
        for _ in range(n_args):
            if k < len(s) and s[k] == "{":
                end = find_group(s, k)
                if end < 0:
                    break
                args.append(s[k:end])
                k = end
            elif k < len(s) and s[k] not in "}\\^_":
                args.append("{" + s[k] + "}")
                k += 1
            else:
                break
        out.append("".join(args))
        i = k


_THOUSANDS_RE = re.compile(r"(?<![\d.,])\d{1,3}(?:,\d{3})+(?![\d,])")


def normalize_answer(answer: str) -> str:
    """Minerva-style normal form of an answer string (module docstring lists the rules)."""
    if not isinstance(answer, str):
        return ""
    s = answer.strip()
    s = _unwrap_box(s)
    # 1. math delimiters
    for tok in ("\\displaystyle", "\\(", "\\)", "\\[", "\\]"):
        s = s.replace(tok, "")
    s = s.replace("\\$", "\x00DOLLAR\x00").replace("$", "").replace("\x00DOLLAR\x00", "\\$")
    s = s.strip()
    s = _unwrap_box(s)
    # 3. spelling variants and spacing macros (before the '=' split so \left( does not hide it)
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("\\mbox", "\\text")
    s = re.sub(r"\\left\s*\.|\\right\s*\.", "", s)
    s = re.sub(r"\\(?:left|right)(?![A-Za-z])", "", s)
    s = re.sub(r"\\[!,;:]|\\ |~", " ", s)
    # 2. keep the right-hand side of the last top-level '=' (unless a top-level comma exists)
    eqs = _top_level_positions(s, "=")
    if eqs and not _top_level_positions(s, ","):
        s = s[eqs[-1] + 1 :]
    # 4. degrees, percent, dollars
    s = re.sub(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|\\degree|°", "", s)
    s = s.replace("\\%", "").replace("%", "").replace("\\$", "")
    # 5. unit words and text wrappers
    s = _replace_groups(s, "\\text", _drop_unit_text)
    for cmd in ("\\textbf", "\\textit", "\\text", "\\mathrm", "\\mathbf"):
        s = _replace_groups(s, cmd, lambda arg, rest: (arg, 0))
    while True:
        m = re.search(r"(?<=[\d}).])\s*([A-Za-z]{2,})\s*(?:\^\s*\{?[23]\}?)?\s*\.?\s*$", s)
        if m is None or m.group(1).lower() not in UNIT_WORDS:
            break
        s = s[: m.start()]
    # 6. whitespace, trailing period / line break
    s = re.sub(r"\s+", "", s)
    while s.endswith(".") or s.endswith("\\\\"):
        s = s[:-1] if s.endswith(".") else s[:-2]
    # 7. shorthand
    s = _expand_shorthand(s, "\\frac", 2)
    s = _expand_shorthand(s, "\\sqrt", 1)
    # 8. thousands separators
    s = s.replace("{,}", ",") if re.search(r"\d\{,\}\d", s) else s
    s = _THOUSANDS_RE.sub(lambda m: m.group(0).replace(",", ""), s)
    # 9. bare decimals
    s = re.sub(r"(?<![\d}])\.(\d)", r"0.\1", s)
    return s
