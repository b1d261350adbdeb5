"""Text <-> token ids for any GGUF vocabulary llama.cpp reads, as ``llama_vocab::impl::tokenize``,
``token_to_piece`` and ``detokenize`` do it.

``encode``: the special-token partition (``special.py``), then per raw-text fragment the
vocabulary's session (``bpe``, ``spm``, ``wpm``, ``ugm``, ``rwkv``, ``plamo2``) inside llama.cpp's
framing for its type: BOS / EOS / SEP where ``add_special`` and the file's flags say so,
SentencePiece's space prefix (at the start and after each special token) and ``▁`` escape.
``decode``: each token's piece (control and unknown tokens hidden unless ``special``), the
prefixed space of an SPM text taken off the first piece, and llama.cpp's ``clean_spaces`` passes.
"""

from __future__ import annotations

import importlib
import numbers
import os
import pathlib
from collections.abc import Mapping, Sequence

from onnx_struct.errors import ValidationError, limit_exceeded
from onnx_struct.limits import MAX_TOKENIZE_CHARS
from onnx_struct.llm.tokenizer.bpe import CHAR_BYTES, BpeSession, HybridDnaSession, WhitespaceSession
from onnx_struct.llm.tokenizer.special import SpecialPartition
from onnx_struct.llm.tokenizer.vocab import Attr, Vocab, ids_with, load_vocab

SPACE = "\u2581"  # SentencePiece's escaped space
_HIDDEN = Attr.UNKNOWN | Attr.CONTROL  # pieces shown only with special=True


def _session(vocab: Vocab):
    """The tokenizer model's session (the other modules are imported when their model is used)."""
    if vocab.model == "bpe":
        if vocab.tokenizer_model == "hybriddna":
            return HybridDnaSession(vocab)
        if vocab.tokenizer_model == "whitespace":
            return WhitespaceSession(vocab)
        return BpeSession(vocab)
    # the other models' modules, imported when their model is used (by name: they are built apart)
    names = {"spm": "SpmSession", "wpm": "WpmSession", "ugm": "UgmSession", "rwkv": "RwkvSession"}
    names["plamo2"] = "Plamo2Session"
    try:
        module = importlib.import_module(f"onnx_struct.llm.tokenizer.{vocab.model}")
    except ModuleNotFoundError as error:
        if error.name != f"onnx_struct.llm.tokenizer.{vocab.model}":
            raise
        raise ValidationError(
            "gguf.kv['tokenizer.ggml.model']",
            f"the {vocab.tokenizer_model!r} tokenizer model ({vocab.model}) is not built in this version",
            code="unsupported_tokenizer",
        ) from None
    return getattr(module, names[vocab.model])(vocab)


class Tokenizer:
    """A GGUF vocabulary's tokenizer: ``encode``, ``decode``, ``token_to_piece``, ``streamer``.

    Attributes:
        vocab: the :class:`~onnx_struct.llm.tokenizer.vocab.Vocab` it works from.
        vocab_size: the number of tokens.
        bos_id: the BOS id (None where the vocabulary has none).
        eos_id: the EOS id (None where it has none).
        eos_ids: every end-of-generation id (llama.cpp's special_eog_ids).
        add_bos: whether ``encode`` puts BOS first by default (the file's add_bos_token as
            llama.cpp resolves it).
    """

    def __init__(self, vocab: Vocab) -> None:
        """Build the tokenizer of a loaded vocabulary (``load_tokenizer`` reads one from a model).

        Args:
            vocab: the vocabulary (``load_vocab(metadata)``).

        Raises:
            ValidationError: a byte token whose text is not ``<0xXX>``, or a tokenizer model
                this version does not build.
        """
        self.vocab = vocab
        self.metadata: Mapping[str, object] | None = None  # the GGUF metadata, where load_tokenizer read it
        self.vocab_size = len(vocab.tokens)
        self.bos_id = vocab.bos
        self.eos_id = vocab.eos
        self.eos_ids = vocab.eog
        self.add_bos = vocab.add_bos and vocab.bos is not None
        if vocab.model in ("spm", "ugm", "bpe"):
            for i in ids_with(vocab.attrs, Attr.BYTE):
                _byte_value(vocab.tokens[i], i)
        self._partition = SpecialPartition(vocab)
        self._session = _session(vocab)
        self._pieces: dict[int, bytes] = {}
        vocab.nl = self._linefeed()

    def _linefeed(self) -> int | None:
        """llama.cpp's linefeed_id: SPM's byte piece of '\n' (or the piece "\n"), WPM's pad id,
        otherwise the first id of "\n" tokenized (the pad id where there is none)."""
        v = self.vocab
        if v.model == "spm":
            found = v.token_to_id.get("<0x0A>", v.token_to_id.get("\n"))
            return found if found is not None else v.pad
        if v.model == "wpm":
            return v.pad
        try:
            ids = self.encode("\n", add_bos=False)
        except ValidationError:  # a session that cannot tokenize it (no unknown token)
            ids = []
        return ids[0] if ids else v.pad

    # ------------------------------------------------------------------ encode
    def encode(self, text: str, *, add_bos: bool | None = None, special: bool = False) -> list[int]:
        """Token ids of ``text``: ``llama_tokenize(text, add_special, parse_special=special)``.

        Args:
            text: the text.
            add_bos: None: ``add_special`` (BOS, EOS, SEP as the file's flags say); False: no
                added tokens; True: as None, with BOS first wherever the vocabulary has one.
            special: match control tokens in the text (user-defined tokens are always matched).

        Returns:
            The token ids.

        Raises:
            ValidationError: ``text`` is not a str, is not valid Unicode (a lone surrogate), or
                is longer than ``MAX_TOKENIZE_CHARS``.
        """
        if not isinstance(text, str):
            raise ValidationError("encode(text)", f"a {type(text).__name__}, not a str", code="bad_argument")
        if len(text) > MAX_TOKENIZE_CHARS:
            raise limit_exceeded("encode(text)", f"{len(text)} characters to tokenize", len(text), MAX_TOKENIZE_CHARS)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            raise ValidationError(
                "encode(text)", f"character {error.start} is a lone surrogate, not Unicode text", code="bad_argument"
            ) from None
        add_special = add_bos is not False
        v = self.vocab
        framed = v.add_bos or v.model == "wpm" if v.model not in ("rwkv", "plamo2") else False  # no framing there
        bos = v.bos if add_special and (framed or add_bos is True) else None
        out: list[int] = [bos] if bos is not None else []
        previous_special = True  # SentencePiece prefixes a space at the start and after special tokens
        for fragment in self._partition.partition(text, special):
            if isinstance(fragment, int):
                out.append(fragment)
                previous_special = True
                continue
            if v.model == "spm":
                if v.add_space_prefix and previous_special:
                    fragment = " " + fragment
                fragment = fragment.replace(" ", SPACE)
            elif v.model == "bpe" and v.escape_whitespaces:
                fragment = fragment.replace(" ", SPACE)
            out += self._session.tokenize(fragment)
            previous_special = False
        if add_special:
            if v.model == "wpm":
                if v.sep is not None:
                    out.append(v.sep)
            elif v.model in ("spm", "bpe", "ugm") and v.add_eos and v.eos is not None:
                out.append(v.eos)
        return out

    # ------------------------------------------------------------------ decode
    def token_to_piece(self, token: int, *, special: bool = False) -> bytes:
        """``llama_token_to_piece(token, lstrip=0, special)``: the token's bytes.

        Args:
            token: a token id.
            special: show control and unknown tokens (otherwise they are empty).

        Returns:
            The piece's bytes (not always whole UTF-8: a byte token is one byte).

        Raises:
            ValidationError: the id is outside the vocabulary.
        """
        self._check_id(token, "token_to_piece(token)")
        token = int(token)  # a numpy integer indexes and keys the cache as the int it is
        if not special and self.vocab.attrs[token] & _HIDDEN:
            return b""
        piece = self._pieces.get(token)
        if piece is None:
            piece = self._pieces[token] = self._piece(token)
        return piece

    def _piece(self, token: int) -> bytes:
        v = self.vocab
        text, attr = v.tokens[token], v.attrs[token]
        if v.model == "rwkv":
            return importlib.import_module("onnx_struct.llm.tokenizer.rwkv").token_bytes(text)
        if v.model == "plamo2":
            if attr & Attr.BYTE and len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
                digits = text[3:5]
                if all(c in "0123456789abcdefABCDEF" for c in digits):
                    return bytes([int(digits, 16)])
            return text.encode("utf-8")
        if attr & (_HIDDEN | Attr.USER_DEFINED):
            return text.encode("utf-8")
        if attr & Attr.NORMAL:
            if v.model != "bpe" or v.escape_whitespaces:
                return text.replace(SPACE, " ").encode("utf-8")
            return _byte_decode(text)
        if attr & Attr.BYTE:
            return bytes([_byte_value(text, token)])
        return b""  # unused and undefined tokens: no text, as llama.cpp

    def decode_bytes(self, ids: Sequence[int], *, special: bool = False) -> bytes:
        """``llama_detokenize(ids, remove_special=False, unparse_special=special)`` as bytes.

        Args:
            ids: token ids.
            special: show control and unknown tokens.

        Returns:
            The bytes (not necessarily valid UTF-8).

        Raises:
            ValidationError: an id outside the vocabulary (the path names its index).
        """
        pieces = []
        for i, token in enumerate(ids):
            self._check_id(token, f"decode(ids)[{i}]")
            piece = self.token_to_piece(token, special=special)
            if i == 0 and self.vocab.add_space_prefix and piece.startswith(b" "):
                # llama_detokenize's lstrip: the space the prefix added, off the very first token
                # only (after a BOS, hidden or not, the next token keeps its space)
                piece = piece[1:]
            pieces.append(piece)
        data = b"".join(pieces)
        return clean_spaces(data) if self.vocab.clean_spaces else data

    def decode(self, ids: Sequence[int], *, special: bool = False) -> str:
        """The text of ``ids`` (:meth:`decode_bytes`; bytes that are not UTF-8 become U+FFFD).

        Args:
            ids: token ids.
            special: show control and unknown tokens.

        Returns:
            The text.

        Raises:
            ValidationError: an id outside the vocabulary (the path names its index).
        """
        return self.decode_bytes(ids, special=special).decode("utf-8", "replace")

    def save_pretrained(self, directory: str | os.PathLike) -> list[pathlib.Path]:
        """Write the Hugging Face tokenizer folder of this vocabulary (``tokenizer.json``,
        ``tokenizer_config.json``, ``special_tokens_map.json``, ``chat_template.jinja``), which
        ``transformers.PreTrainedTokenizerFast.from_pretrained`` loads with this tokenizer's ids
        (:func:`onnx_struct.llm.tokenizer.hf_export.save_pretrained`; needs ``tokenizers``).

        Args:
            directory: the folder to write (created if absent).

        Returns:
            The files written.

        Raises:
            ValidationError: the vocabulary has no exact HF ``tokenizers`` equivalent
                (``unsupported_tokenizer``); nothing is written then.
        """
        # by name, as the sessions: hf_export builds on this module (and on the optional tokenizers)
        return importlib.import_module("onnx_struct.llm.tokenizer.hf_export").save_pretrained(self, directory)

    def streamer(self, *, special: bool = False) -> TokenStreamer:
        """A :class:`TokenStreamer` over this tokenizer's pieces.

        Args:
            special: show control and unknown tokens.

        Returns:
            A new streamer.
        """
        return TokenStreamer(self, special)

    def _check_id(self, token: object, path: str) -> None:
        # an int or a numpy integer (numbers.Integral), never a bool, a float or a str
        if isinstance(token, bool) or not isinstance(token, numbers.Integral) or not 0 <= token < self.vocab_size:
            raise ValidationError(path, f"{token!r} is not a token id below {self.vocab_size}", code="bad_argument")


class TokenStreamer:
    """Text of generated tokens as they come: ``push(id)`` returns what the token completes (whole
    UTF-8 characters only), ``flush()`` what is left (incomplete bytes as U+FFFD). The pieces are
    ``token_to_piece``'s, the first shown one's SentencePiece space removed as ``decode`` removes it;
    ``clean_spaces`` is not applied (a later token cannot take back text already shown)."""

    def __init__(self, tokenizer: Tokenizer, special: bool) -> None:
        self._tokenizer = tokenizer
        self._special = special
        self._pending = b""
        self._first = True

    def push(self, token: int) -> str:
        """Add one token id; return the text it completes ("" while a character is unfinished)."""
        self._tokenizer._check_id(token, "push(token)")
        piece = self._tokenizer.token_to_piece(token, special=self._special)
        if self._first and piece and self._tokenizer.vocab.add_space_prefix:
            piece = piece[1:] if piece.startswith(b" ") else piece
            self._first = False
        data = self._pending + piece
        cut = _complete_prefix(data)
        self._pending = data[cut:]
        return data[:cut].decode("utf-8", "replace")

    def flush(self) -> str:
        """The bytes still held, as text (an unfinished character as U+FFFD)."""
        data, self._pending = self._pending, b""
        return data.decode("utf-8", "replace")


def _complete_prefix(data: bytes) -> int:
    """Length of ``data`` without an unfinished UTF-8 character at its end."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:
            continue  # a continuation byte: look further back for its lead byte
        need = 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4 if byte >> 3 == 0b11110 else 1
        return len(data) - back if need > back else len(data)
    return len(data)


def _byte_value(text: str, token: int) -> int:
    if len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
        digits = text[3:5]
        if all(c in "0123456789abcdefABCDEF" for c in digits):  # int() would take " 1" or "+1"
            return int(digits, 16)
    raise ValidationError(f"gguf.kv['tokenizer.ggml.tokens'][{token}]", f"byte piece {text!r} is not <0xXX>")


def _byte_decode(text: str) -> bytes:
    """llama.cpp's llama_decode_text: GPT-2 byte characters back to bytes; a character outside
    the map gives ``[UNK_BYTE_0x<its UTF-8 in hex><the token's text>]``, as llama.cpp writes it."""
    out = bytearray()
    for c in text:
        byte = CHAR_BYTES.get(c)
        if byte is not None:
            out.append(byte)
        else:
            out += b"[UNK_BYTE_0x" + c.encode("utf-8").hex().encode() + text.encode("utf-8") + b"]"
    return bytes(out)


def clean_spaces(data: bytes) -> bytes:
    """llama.cpp's detokenize ``clean_spaces`` passes, byte for byte: the space before ``?!.,``
    removed, `` ' `` becomes ``'``, and the space before ``'s``, ``'m``, ``'re``, ``'ve`` removed."""
    text = bytearray(data)
    n = len(text)
    if n == 0:
        return b""
    # first pass: " ?", " !", " .", " ,"
    total = 1
    for i in range(1, n):
        x = text[i]
        if text[i - 1] == 0x20 and x in b"?!.,":
            total -= 1
        text[total] = x
        total += 1
    # second pass: a single apostrophe between spaces
    n, total, i = total, 1, 1
    while i < n:
        x = text[i]
        if x == 0x27 and i + 1 < n and text[i - 1] == 0x20 and text[i + 1] == 0x20:
            total -= 1
            i += 1
            text[i] = 0
        text[total] = x
        total += 1
        i += 1
    # third pass: contractions " 's", " 'm", " 're", " 've"
    n, total = total, 1
    for i in range(1, n):
        x = text[i]
        if text[i - 1] == 0x20 and x == 0x27 and i + 1 < n:
            x1 = text[i + 1]
            if x1 in b"sm" or (i + 2 < n and (x1, text[i + 2]) in ((0x72, 0x65), (0x76, 0x65))):
                total -= 1
        text[total] = x
        total += 1
    return bytes(text[:total])


def load_tokenizer(model: object) -> Tokenizer:
    """The tokenizer of a GGUF file or of a model converted from one.

    Args:
        model: a path to a ``.gguf`` file or to a converted ``.onnx``, an ``onnx.ModelProto``
            (its ``metadata_props`` hold the GGUF metadata), a loaded model, a metadata mapping,
            or a :class:`Tokenizer` (returned as it is).

    Returns:
        The :class:`Tokenizer`.

    Raises:
        ValidationError: no tokenizer metadata, or metadata llama.cpp would refuse (the path
            names the key).
    """
    if isinstance(model, Tokenizer):
        return model
    metadata = model_metadata(model, "load_tokenizer(model)")
    tokenizer = Tokenizer(load_vocab(metadata))
    tokenizer.metadata = metadata
    return tokenizer


def model_metadata(model: object, where: str) -> Mapping[str, object]:
    """The GGUF metadata of ``model``: a mapping as it is, a :class:`Tokenizer`'s, a converted
    model's ``metadata_props`` (an ``onnx.ModelProto``, onnx_struct's ModelProto, a LoadedModel,
    a ``.onnx`` path), or a ``.gguf`` file's (told by its magic bytes).

    Raises:
        ValidationError: (``bad_argument``, at ``where``) ``model`` is none of these; a file that is
            neither GGUF nor ONNX, or a malformed GGUF file (the path names what).
    """
    import onnx  # noqa: PLC0415 - only for models

    from onnx_struct.formats.gguf.metadata import decode_metadata  # noqa: PLC0415

    if isinstance(model, Mapping):
        return model
    if isinstance(model, Tokenizer) and getattr(model, "metadata", None) is not None:
        return model.metadata
    if isinstance(model, onnx.ModelProto):
        return decode_metadata(model)
    if hasattr(model, "proto"):  # a LoadedModel
        return decode_metadata(model.proto.metadata_props)
    if hasattr(model, "metadata_props"):  # onnx_struct's own ModelProto (from_onnx)
        return decode_metadata(model.metadata_props)
    if isinstance(model, (str, os.PathLike)):
        from onnx_struct.payload.external import open_regular_input  # noqa: PLC0415

        path = pathlib.Path(model)
        # a FIFO would block the open and /dev/zero feed onnx.load forever: refused unopened
        with open_regular_input(path, "model") as handle:
            magic = handle.read(4)
        if magic == b"GGUF":
            from onnx_struct.llm.tokenizer.gguf_metadata import read_gguf_metadata  # noqa: PLC0415

            return read_gguf_metadata(path)
        try:
            proto = onnx.load(os.fspath(path), load_external_data=False)
        except Exception as error:  # protobuf's DecodeError and its kin: not a model file
            raise ValidationError(str(path), f"neither a GGUF file nor an ONNX model: {error}") from None
        return decode_metadata(proto)
    raise ValidationError(
        where,
        f"a {type(model).__name__}: not a model, a .onnx or .gguf path, a Tokenizer or a metadata mapping",
        code="bad_argument",
    )
