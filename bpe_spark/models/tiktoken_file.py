"""tiktoken ``.tiktoken`` files: one ``base64(token) rank`` per line; the rank is the token id.

A ``.tiktoken`` file holds ranks, not merges; reading it gives the keyword arguments of
:class:`~bpe_spark.encoding.tokenizer.Tokenizer`, with the ranks as ids. Encoding uses tiktoken's own rule
(``merge_rule="ranks"``: whole-pretoken lookup, then repeatedly merge the adjacent pair whose
concatenation has the lowest rank). ``tok.merges`` is derived for people and exports: for each
token of two or more bytes, the two parts that this rule, using only lower ranks, leaves of the
token's bytes.

The file holds no pattern and no special tokens. They come from, in this order:

1. ``pattern=`` / ``special_tokens=`` given to the reader;
2. the **sidecar** ``<file>.json`` beside it (``model.tiktoken.json``), which the export writes:
   ``{"name", "pat_str", "special_tokens"}``, exactly ``tiktoken.Encoding``'s keywords, so
   ``tiktoken.Encoding(**json.load(open("model.tiktoken.json")),
   mergeable_ranks=tiktoken.load.load_tiktoken_bpe("model.tiktoken"))`` gives our ids;
3. OpenAI's published files (r50k_base, p50k_base, cl100k_base, o200k_base), recognised by
   content: the SHA-256 of the file (the hash tiktoken checks), or of its ranks written out as
   OpenAI writes them (a copy with CRLF line ends or another line order is the same file). They
   get tiktoken_ext/openai_public.py's pattern and specials (r50k/p50k: GPT-2's pattern, which
   tiktoken's r50k pattern only rewrites for speed; p50k_edit and o200k_harmony share a file
   with p50k_base / o200k_base: pass their ``special_tokens=``).

Anything else without ``pattern=`` is refused in one line that says what to pass.

>>> import tempfile, pathlib
>>> from bpe_spark import Tokenizer, TrainerConfig, train
>>> tok = train(["ab ab abc"], TrainerConfig(vocab_size=258, special_tokens=("<|eot|>",)))
>>> path = pathlib.Path(tempfile.mkdtemp()) / "toy.tiktoken"
>>> write_tiktoken(tok, path)
>>> sorted(p.name for p in path.parent.iterdir())
['toy.tiktoken', 'toy.tiktoken.json']
>>> back = Tokenizer.load(path)  # pattern and specials from the sidecar
>>> back.merges == tok.merges, back.encode("abc<|eot|>", allowed_special="all")
(True, [256, 99, 257])
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import regex

from bpe_spark.errors import ConfigError, ModelFormatError, in_cli, option
from bpe_spark.bpe.fields import (
    ID_RANGE,
    MAX_TOKEN_ID,
    Fields,
    check_count,
    check_pattern,
    check_token,
    is_id,
    require_all_bytes,
    show,
)
from bpe_spark.models.files import read_file_bytes, read_json_file
from bpe_spark.bpe.patterns import pattern_source, preset_name
from bpe_spark.bpe.words import bpe_merge

_GPT2_SPECIALS = {"<|endoftext|>": 50256}
# OpenAI's published files by the SHA-256 of their content (the hashes tiktoken itself checks).
KNOWN_FILES: dict[str, tuple[str, str, dict[str, int]]] = {
    "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7": (
        "cl100k_base",
        "cl100k",
        {
            "<|endoftext|>": 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            "<|endofprompt|>": 100276,
        },
    ),
    "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d": (
        "o200k_base",
        "o200k",
        {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
    ),
    "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930": (
        "r50k_base",
        "gpt2",
        _GPT2_SPECIALS,
    ),
    "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069": (
        "p50k_base",
        "gpt2",
        _GPT2_SPECIALS,
    ),
}


SIDECAR_SUFFIX = ".json"
SIDECAR_KEYS = ("name", "pat_str", "special_tokens")


def rank_lines(ranks: Mapping[int, bytes]) -> Iterator[bytes]:
    """The lines of a ``.tiktoken`` file as OpenAI (and tiktoken's ``dump_tiktoken_bpe``) write
    them: rank order, ``base64(token) rank`` and LF.

    >>> list(rank_lines({1: b"b", 0: b"a"}))
    [b'YQ== 0\\n', b'Yg== 1\\n']
    """
    for rank in sorted(ranks):
        yield base64.b64encode(ranks[rank]) + b" %d\n" % rank


def sidecar_path(path) -> Path:
    """The sidecar of a ``.tiktoken`` file: ``model.tiktoken`` -> ``model.tiktoken.json``."""
    path = Path(path)
    return path.with_name(path.name + SIDECAR_SUFFIX)


def encoding_line(tiktoken_file: str = "model.tiktoken") -> str:
    """The Python lines that build tiktoken's ``Encoding`` of an export from its sidecar.

    >>> print(encoding_line("en32k.tiktoken"))
    import json, tiktoken, tiktoken.load
    side = json.load(open("en32k.tiktoken.json", encoding="utf-8"))
    enc = tiktoken.Encoding(name=side["name"], pat_str=side["pat_str"], mergeable_ranks=tiktoken.load.load_tiktoken_bpe("en32k.tiktoken"), special_tokens=side["special_tokens"])
    """
    side = json.dumps(tiktoken_file + SIDECAR_SUFFIX)
    return (
        "import json, tiktoken, tiktoken.load\n"
        f'side = json.load(open({side}, encoding="utf-8"))\n'
        'enc = tiktoken.Encoding(name=side["name"], pat_str=side["pat_str"], '
        f"mergeable_ranks=tiktoken.load.load_tiktoken_bpe({json.dumps(tiktoken_file)}), "
        'special_tokens=side["special_tokens"])'
    )


def tiktoken_sidecar(tok, name: str) -> dict[str, Any]:
    """The sidecar of ``tok``'s ``.tiktoken`` export: ``tiktoken.Encoding``'s ``name``,
    ``pat_str`` and ``special_tokens``. Refused for what tiktoken cannot run: a normalization
    or lowercasing step, or an imported pipeline (tiktoken has only a regex before BPE)."""
    steps = [
        step
        for step, present in (
            (f"normalization {tok.normalization!r}", tok.normalization),
            ("lowercase", tok.lowercase),
            ("an imported tokenizers pipeline", getattr(tok, "pipeline", None)),
        )
        if present
    ]
    if steps:
        raise ConfigError(
            f"this tokenizer has {' and '.join(steps)}, which tiktoken cannot apply, so a .tiktoken "
            "export would encode differently; export tokenizer.json instead"
        )
    return {
        "name": name,
        "pat_str": pattern_source(tok.pattern),
        "special_tokens": dict(sorted(tok.special_tokens.items(), key=lambda item: item[1])),
    }


def write_tiktoken(tok, path, *, sidecar=None) -> None:
    """Write the ``.tiktoken`` file of a byte-scheme tokenizer (rank = token id, specials left out,
    as in OpenAI's files) and its sidecar (``sidecar``, by default :func:`sidecar_path`) holding
    the pattern and the special tokens. The encoding's name: the name the model was imported
    under, else the sidecar's name up to its first dot (``en32k.tiktoken.json``: ``en32k``)."""
    if tok.scheme != "byte":
        raise ConfigError(".tiktoken files hold byte tokens; this tokenizer is char scheme")
    conflict = rank_rule_conflict(tok)
    if conflict is not None:
        raise ConfigError(f"a .tiktoken file would give other ids than this model: {conflict}; "
                          "export tokenizer.json instead")
    path = Path(path)
    sidecar = Path(sidecar) if sidecar is not None else sidecar_path(path)
    name = tok.metadata.get("source", {}).get("encoding") or sidecar.name.split(".")[0]
    side = tiktoken_sidecar(tok, name)
    vocab = tok.ordinary_vocab
    seen: dict[bytes, int] = {}
    for token_id in sorted(vocab):
        value = vocab[token_id]
        if value in seen:
            raise ConfigError(
                f"ids {seen[value]} and {token_id} hold the same bytes; a .tiktoken file cannot"
            )
        seen[value] = token_id
    with open(path, "wb") as fh:
        fh.writelines(rank_lines(vocab))
    with open(sidecar, "w", encoding="utf-8") as fh:
        json.dump(side, fh, ensure_ascii=False, indent=2)
        fh.write("\n")


def parse_ranks(path) -> tuple[dict[int, bytes], str]:
    """``{rank: token bytes}`` of a ``.tiktoken`` file, and the SHA-256 of its content."""
    path = Path(path)
    raw = read_file_bytes(path)
    ranks: dict[int, bytes] = {}
    seen: dict[bytes, int] = {}
    lines = raw.split(b"\n")
    check_count(len(lines) - 1, str(path), "lines (tokens)")
    for line_no, line in enumerate(lines, start=1):
        line = line.rstrip(b"\r")
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2:
            raise ModelFormatError(
                f"{path}: line {line_no}: expected 'base64-token rank', got {line[:60]!r}"
            )
        try:
            token = base64.b64decode(parts[0], validate=True)
        except (binascii.Error, ValueError):
            raise ModelFormatError(
                f"{path}: line {line_no}: {parts[0][:60]!r} is not base64"
            ) from None
        if not parts[1].isdigit() or len(parts[1]) > 10 or int(parts[1]) > MAX_TOKEN_ID:
            raise ModelFormatError(
                f"{path}: line {line_no}: rank {parts[1][:20]!r} is not {ID_RANGE}"
            )
        rank = int(parts[1])
        if not token:
            raise ModelFormatError(f"{path}: line {line_no}: the empty token")
        check_token(token, f"{path}: line {line_no}")
        if rank in ranks:
            raise ModelFormatError(f"{path}: line {line_no}: rank {rank} is given twice")
        if token in seen:
            raise ModelFormatError(
                f"{path}: line {line_no}: token {token!r} already has rank {seen[token]}"
            )
        ranks[rank] = token
        seen[token] = rank
    if not ranks:
        raise ModelFormatError(f"{path}: no tokens")
    return ranks, hashlib.sha256(raw).hexdigest()


def _rank_parts(ranks: Mapping[int, bytes]) -> Iterator[tuple[int, list[int] | None]]:
    """Each multi-byte token's rank and the parts tiktoken's rule leaves of its bytes when only
    ranks below its own may merge (None: one of its bytes is no token)."""
    token_to_id = {value: rank for rank, value in ranks.items()}
    byte_ids = [token_to_id.get(bytes([b])) for b in range(256)]
    limit = 0

    def priority(left: int, right: int) -> tuple[int, int] | None:
        token_id = token_to_id.get(ranks[left] + ranks[right])
        if token_id is None or token_id >= limit:
            return None
        return token_id, token_id

    for rank in sorted(ranks):
        value = ranks[rank]
        if len(value) < 2:
            continue
        start = [byte_ids[b] for b in value]
        if None in start:
            yield rank, None
            continue
        limit = rank
        yield rank, bpe_merge(start, priority)


def derive_merges(ranks: Mapping[int, bytes]) -> tuple[list[tuple[int, int]], list[int]]:
    """Merges (in rank order) that make the multi-byte tokens, and the ids no merge makes.

    The merge of token ``t`` is the pair of parts that tiktoken's rule leaves of ``t``'s bytes when
    only ranks below ``t``'s may merge: exactly how encoding builds ``t``.
    """
    merges: list[tuple[int, int]] = []
    orphans: list[int] = []
    for rank, parts in _rank_parts(ranks):
        if parts is not None and len(parts) == 2:
            merges.append((parts[0], parts[1]))
        else:
            orphans.append(rank)  # reachable only by whole-pretoken lookup
    return merges, orphans


def rank_rule_conflict(tok) -> str | None:
    """Why tiktoken's rank rule (rank = id) would not build ``tok``'s tokens as its merges do,
    in one line, or None: then each token is made from its own merge's pair, as the merges make
    it. A rank model (``merge_rule == "ranks"``) is its own rank rule."""
    if tok.merge_rule == "ranks":
        return None
    made: dict[int, tuple[int, int]] = {}
    for left, right, new in tok.merge_ids:
        if new in made:
            return (f"token {new} ({tok.ordinary_vocab[new]!r}) is made by two merges, {made[new]} and "
                    f"{(left, right)}; a rank holds one")
        made[new] = (left, right)
    vocab = tok.ordinary_vocab
    for rank, parts in _rank_parts(vocab):
        pair = tuple(parts) if parts is not None and len(parts) == 2 else None
        if made.get(rank) != pair:
            return (f"tiktoken's rank rule builds token {rank} ({vocab[rank]!r}) from {pair} where its merge "
                    f"is {made.get(rank)}")
    return None


def read_sidecar(path) -> tuple[str, str, dict[str, int]]:
    """``(name, pattern, special_tokens)`` of a sidecar file (:func:`tiktoken_sidecar`); the
    pattern is a preset's name when it is exactly that preset's regex."""
    fields = Fields(path)
    top = fields.top(read_json_file(Path(path)))
    for key in top:
        if key not in SIDECAR_KEYS:
            raise fields.error(key, f"is not a tiktoken.Encoding keyword this file may hold {SIDECAR_KEYS}")
    name = fields.get(top, "name", str)
    pattern = fields.get(top, "pat_str", str)
    check_pattern(pattern, fields.where("pat_str"))
    try:
        regex.compile(pattern)
    except regex.error as exc:
        raise fields.error("pat_str", f"{show(pattern)} is no valid regex ({exc})") from None
    specials = fields.get(top, "special_tokens", dict)
    check_count(len(specials), fields.where("special_tokens"), "special tokens")
    for token, token_id in specials.items():
        check_token(token, fields.where(f"special_tokens[{show(token)}]"))
        if not is_id(token_id):
            raise fields.bad(f"special_tokens[{show(token)}]", token_id, ID_RANGE)
    return name, preset_name(pattern) or pattern, dict(specials)


def canonical_digest(ranks: Mapping[int, bytes]) -> str:
    """The SHA-256 of ``ranks`` written as OpenAI writes a ``.tiktoken`` file
    (:func:`rank_lines`): an OpenAI file's own hash, whatever its line ends or order."""
    digest = hashlib.sha256()
    for line in rank_lines(ranks):
        digest.update(line)
    return digest.hexdigest()


def known_file(ranks: Mapping[int, bytes], digest: str) -> tuple[str, str, dict[str, int]] | None:
    """``(name, pattern, special_tokens)`` of an OpenAI file, by its hash or its content."""
    known = KNOWN_FILES.get(digest)
    if known is None:
        known = KNOWN_FILES.get(canonical_digest(ranks))
    return known


def read_tiktoken(
    path,
    *,
    pattern: str | None = None,
    special_tokens: Mapping[str, int] | None = None,
    **unused,
) -> dict[str, Any]:
    """The Tokenizer keyword arguments of a ``.tiktoken`` file; ids are the file's ranks.

    The pattern and special tokens: ``pattern=`` / ``special_tokens=``, else the sidecar
    ``<file>.json``, else those of the OpenAI file it is (module docstring).
    """
    if unused:
        raise ConfigError(f".tiktoken loading takes no options {sorted(unused)}")
    path = Path(path)
    ranks, digest = parse_ranks(path)
    side = sidecar_path(path)
    source: dict[str, Any] = {"format": "tiktoken", "path": str(path), "sha256": digest}
    if side.is_file():
        found = read_sidecar(side)
        source["sidecar"] = str(side)
    else:
        found = known_file(ranks, digest)
    if pattern is None:
        if found is None:
            raise ModelFormatError(
                f"{path}: field 'pattern' is unknown: the file (sha256 {digest[:16]}...) is none of "
                f"OpenAI's {', '.join(name for name, _, _ in KNOWN_FILES.values())} and has no "
                f"sidecar {side.name}; pass {option('pattern')} (a preset such as 'cl100k', or a regex)"
                + ("" if in_cli() else " and special_tokens= if it has any")
            )
        pattern = found[1]
    if special_tokens is None:
        special_tokens = found[2] if found else {}
    special_tokens = dict(special_tokens)
    for token, token_id in special_tokens.items():
        if token_id in ranks:
            raise ConfigError(
                f"special token {token!r} has id {token_id}, which {path} gives to {ranks[token_id]!r}"
            )
    require_all_bytes(set(ranks.values()), str(path))
    if found is not None:
        source["encoding"] = found[0]
    return rank_model_kwargs(ranks, special_tokens, pattern, source)


def rank_model_kwargs(ranks: Mapping[int, bytes], special_tokens: Mapping[str, int], pattern: str,
                      source: dict[str, Any]) -> dict[str, Any]:
    """The Tokenizer keyword arguments of a rank-ordered byte vocabulary (a ``.tiktoken`` file,
    a tekken file): tiktoken's rank rule, the merges derived from the ranks, and ``source`` (what
    the file was) with the count of tokens no merge makes, if any."""
    merges, orphans = derive_merges(ranks)
    if orphans:
        source["tokens_without_merge"] = len(orphans)
    return {
        "scheme": "byte",
        "vocab": ranks,
        "merges": merges,
        "special_tokens": dict(special_tokens),
        "pattern": pattern,
        "merge_rule": "ranks",
        "metadata": {"source": source},
    }
