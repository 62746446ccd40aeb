"""Tokenizers for scripts/prepare_data.py, run in its worker processes.

Every document becomes [separator] + its tokens, the separator the
tokenizer's document token:
  byte            UTF-8 bytes, vocabulary 256; separator byte 0 (NUL), so NUL
                  bytes inside a document are dropped (and counted)
  gpt2            tiktoken's GPT-2 BPE; separator <|endoftext|> (50256), as
                  llm.c's data scripts put it before each document
  tokenizer.json  a HF tokenizer (the `tokenizers` package); separator the
                  special token named by --separator-token, else the first of
                  <|begin_of_text|> (Llama 3), <|endoftext|> (GPT-2), <s>,
                  <|end_of_text|>, </s> among its added tokens
A document that is not valid UTF-8 is skipped (counted) or fails the run
(--bad-utf8). The spec (a tuple) crosses to the workers; each loads its
tokenizer once.
"""

import array
import os
import sys

SEPARATOR_CANDIDATES = ("<|begin_of_text|>", "<|endoftext|>", "<s>", "<|end_of_text|>", "</s>")
U32_MAX = 2**32 - 1


class TokenizerError(Exception):
    """A tokenizer that cannot be used: one error line."""


def u32_typecode():
    return "I" if array.array("I").itemsize == 4 else "L"


def describe(spec):
    """(name, vocab, separator id) of a spec, loading it in this process."""
    tok = load(spec)
    return tok.name, tok.vocab, tok.separator


def make_spec(tokenizer, tokenizer_json=None, separator_token=None):
    if tokenizer_json:
        return ("json", tokenizer_json, separator_token)
    if separator_token:
        raise TokenizerError("--separator-token applies to --tokenizer-json only")
    return (tokenizer,)


class ByteTokenizer:
    name, vocab, separator = "byte", 256, 0
    width = 2

    def encode(self, texts):
        """texts: UTF-8 bytes each -> [(tokens bytes, count, NULs dropped)]."""
        out = []
        for data in texts:
            clean = data.replace(b"\0", b"")
            body = b"\0" + clean
            wide = bytearray(2 * len(body))
            wide[0 if sys.byteorder == "little" else 1::2] = body
            out.append((bytes(wide), len(body), len(data) - len(clean)))
        return out


class Gpt2Tokenizer:
    name, width = "gpt2", 2

    def __init__(self):
        hint = ("--tokenizer gpt2 needs tiktoken with the gpt2 encoding cached "
                "(pip install tiktoken, then load tiktoken.get_encoding('gpt2') once online, "
                "or point TIKTOKEN_CACHE_DIR at a cache); use --tokenizer byte otherwise")
        try:
            import tiktoken
        except ImportError:
            raise TokenizerError(f"tiktoken is not installed: {hint}") from None
        try:
            self.enc = tiktoken.get_encoding("gpt2")
        except Exception as e:  # network or cache failures surface as many types
            raise TokenizerError(f"could not load the gpt2 encoding ({type(e).__name__}: {e}): "
                                 f"{hint}") from None
        self.vocab = self.enc.n_vocab
        self.separator = self.enc.eot_token

    def encode(self, texts):
        out = []
        for ids in self.enc.encode_ordinary_batch([t.decode("utf-8") for t in texts]):
            toks = array.array("H", [self.separator])
            toks.extend(ids)
            out.append((_little(toks), len(toks), 0))
        return out


class JsonTokenizer:
    def __init__(self, path, separator_token):
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise TokenizerError("--tokenizer-json needs the tokenizers package "
                                 "(WITH_PYPI=1 scripts/install_deps.sh)") from None
        try:
            self.tok = Tokenizer.from_file(path)
        except Exception as e:  # a missing or malformed file surfaces as several types
            raise TokenizerError(f"--tokenizer-json {path}: cannot load it "
                                 f"({type(e).__name__}: {e})") from None
        self.name = path
        self.vocab = self.tok.get_vocab_size(with_added_tokens=True)
        if self.vocab - 1 > U32_MAX:
            raise TokenizerError(f"--tokenizer-json {path}: {self.vocab} tokens; ids past "
                                 f"{U32_MAX} do not fit the uint32 shard format")
        names = [separator_token] if separator_token else list(SEPARATOR_CANDIDATES)
        self.separator = None
        for n in names:
            i = self.tok.token_to_id(n)
            if i is not None:
                self.separator = i
                break
        if self.separator is None:
            raise TokenizerError(
                f"--tokenizer-json {path}: no document separator: "
                + (f"--separator-token {separator_token!r} is not a token of it"
                   if separator_token else
                   f"none of {', '.join(SEPARATOR_CANDIDATES)} is a token of it "
                   "(name one with --separator-token)"))
        self.width = 4 if self.vocab > 65536 else 2

    def encode(self, texts):
        code = u32_typecode() if self.width == 4 else "H"
        out = []
        encs = self.tok.encode_batch([t.decode("utf-8") for t in texts],
                                     add_special_tokens=False)
        for enc in encs:
            toks = array.array(code, [self.separator])
            toks.extend(enc.ids)
            out.append((_little(toks), len(toks), 0))
        return out


def _little(toks):
    if sys.byteorder != "little":
        toks = array.array(toks.typecode, toks)
        toks.byteswap()
    return toks.tobytes()


def load(spec):
    if spec[0] == "byte":
        return ByteTokenizer()
    if spec[0] == "gpt2":
        return Gpt2Tokenizer()
    if spec[0] == "json":
        return JsonTokenizer(spec[1], spec[2])
    raise TokenizerError(f"unknown tokenizer {spec[0]!r}")


# ---- the workers' side: one tokenizer per process, loaded by init_worker.

_worker_tokenizer = None


def _die_with_parent():
    """Linux: SIGTERM this worker when the process that forked it dies (one
    killed, or aborted by a library, would otherwise leave the workers
    waiting on their queue forever, holding its pipes open)."""
    try:
        import ctypes
        import signal
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        parent = os.getppid()
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # it died before the request took effect
            os._exit(1)
    except (OSError, AttributeError):  # not Linux: the pool's own checks remain
        pass


def init_worker(spec, in_worker=False):
    global _worker_tokenizer
    if in_worker:
        _die_with_parent()
    # The workers are the parallelism: the tokenizers library's own threads
    # would oversubscribe the cores (and warn after a fork).
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _worker_tokenizer = load(spec)


def encode_batch(batch):
    """batch: [(doc index, UTF-8 bytes or None)] -> [(doc index, tokens bytes,
    count, NULs dropped, error or None)]. A document that does not decode is
    returned with its error and no tokens: the caller skips it or fails the
    run (--bad-utf8)."""
    tok = _worker_tokenizer
    good, out = [], {}
    for index, data in batch:
        if data is None:
            out[index] = (index, b"", 0, 0, "not encodable as UTF-8")
            continue
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as e:
            out[index] = (index, b"", 0, 0, f"invalid UTF-8 at byte {e.start}")
            continue
        good.append((index, data))
    for (index, _), (toks, n, nul) in zip(good, tok.encode([d for _, d in good])):
        out[index] = (index, toks, n, nul, None)
    return [out[index] for index, _ in batch]
