"""llama.cpp's BPE pre-tokenizers as one table: every ``tokenizer.ggml.pre`` name it maps (and the
missing key) -> a pre type (``PRE_NAMES``, with the tokenizer flags ``llama_vocab::impl::load``
sets for that name), and every pre type -> the regex list ``llm_tokenizer_bpe``'s constructor
gives it, applied in sequence, each splitting the pieces the previous one left (``REGEX_LISTS``).

The regexes are llama.cpp's strings, verbatim: ``\\p{L}`` and the other categories are
llama.cpp's own (see ``regex_split.py``), not PCRE's. ``byte_encode`` False: the pieces are
matched as raw UTF-8 (SentencePiece-style BPE) instead of GPT-2's byte-to-character map.
"""

from __future__ import annotations

from collections.abc import Mapping

from onnx_struct.errors import ValidationError

# (pre types sharing the list, the regexes in the order applied, byte_encode)
_LISTS: tuple[tuple[tuple[str, ...], tuple[str, ...], bool], ...] = (
    # llama3
    (
        ("llama3",),
        (
            "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        ),
        True,
    ),
    # jais2
    (
        ("jais2",),
        (
            "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}",
        ),
        True,
    ),
    # dbrx, smaug
    (
        ("dbrx", "smaug"),
        (
            "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        ),
        True,
    ),
    # deepseek_llm
    (
        ("deepseek_llm",),
        (
            "[\r\n]",
            "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
            "\\s?[!-/:-~！-／：-～‘-‟\u3000-。]+",
            "\\s+$",
            "[一-龥ࠀ-一가-\ud7ff]+",
            "\\p{N}+",
        ),
        True,
    ),
    # deepseek3_llm, hunyuan_dense, joyai_llm, hy_v4
    (
        ("deepseek3_llm", "hunyuan_dense", "joyai_llm", "hy_v4"),
        (
            "\\p{N}{1,3}",
            "[一-龥\u3040-ゟ゠-ヿ]+",
            "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
        ),
        True,
    ),
    # spark2_5
    (
        ("spark2_5",),
        (
            "\\p{N}{1,3}",
            "[一-龥\u3040-ゟ゠-ヿ]+",
            "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+|[\r\n]|\\s+(?!\\S)|\\s+",
            "\\p{N}",
        ),
        True,
    ),
    # youtu
    (
        ("youtu",),
        (
            "[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥\u3040-ゟ゠-ヿ]+",
            "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        ),
        True,
    ),
    # deepseek_coder
    (
        ("deepseek_coder",),
        (
            "[\r\n]",
            "\\s?\\p{L}+",
            "\\s?\\p{P}+",
            "[一-龥ࠀ-一가-\ud7ff]+",
            "\\p{N}",
        ),
        True,
    ),
    # falcon
    (
        ("falcon",),
        (
            "[\\p{P}\\$\\+<=>\\^~\\|`]+",
            "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
            "[0-9][0-9][0-9]",
        ),
        True,
    ),
    # starcoder, refact, command_r, smollm, codeshell, exaone, minerva, mellum2
    (
        ("starcoder", "refact", "command_r", "smollm", "codeshell", "exaone", "minerva", "mellum2"),
        (
            "\\p{N}",
            "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
        ),
        True,
    ),
    # gpt2, mpt, olmo, jais, trillion, granite_docling
    (
        ("gpt2", "mpt", "olmo", "jais", "trillion", "granite_docling"),
        ("'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",),
        True,
    ),
    # stablelm2, qwen2, hunyuan, solar_open
    (
        ("stablelm2", "qwen2", "hunyuan", "solar_open"),
        (
            "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        ),
        True,
    ),
    # qwen35
    (
        ("qwen35",),
        (
            "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        ),
        True,
    ),
    # poro, bloom, gpt3_finnish
    (
        ("poro", "bloom", "gpt3_finnish"),
        (" ?[^(\\s|.,!?…。，、।۔،)]+",),
        True,
    ),
    # chatglm4
    (
        ("chatglm4",),
        (
            "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        ),
        True,
    ),
    # viking
    (
        ("viking",),
        (
            " ?[^(\\s|.,!?…。，、।۔،)]+",
            "\\p{N}",
        ),
        True,
    ),
    # tekken
    (
        ("tekken",),
        (
            "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        ),
        True,
    ),
    # chameleon
    (
        ("chameleon",),
        (
            "<sentinel:[0-9]+>",
            "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
            "([\\t\\n]|    |  )",
            "\\p{N}",
            "[\\p{P}!-/:-@\\[-`{-~]",
            "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
        ),
        True,
    ),
    # gpt4o, minimax_m2
    (
        ("gpt4o", "minimax_m2"),
        (
            "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        ),
        True,
    ),
    # granite_emb_multi
    (
        ("granite_emb_multi",),
        (
            "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))*((?=[\\p{L}\\p{M}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))+((?=[\\p{L}\\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        ),
        True,
    ),
    # tiny_aya
    (
        ("tiny_aya",),
        (
            "\\d{1,3}(?=(?:\\d{3})*\\b)",
            "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        ),
        True,
    ),
    # kimi_k2
    (
        ("kimi_k2",),
        ("\\p{Han}+",),
        True,
    ),
    # superbpe
    (
        ("superbpe",),
        (
            "\\p{N}+",
            "(?=(\\d{3})+(?!\\d))",
        ),
        True,
    ),
    # bailingmoe
    (
        ("bailingmoe",),
        (
            "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
        ),
        True,
    ),
    # seed_coder
    (
        ("seed_coder",),
        (
            "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        ),
        True,
    ),
    # ufakzeka
    (
        ("ufakzeka",),
        ("[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",),
        True,
    ),
    # grok_2
    (
        ("grok_2",),
        (
            "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        ),
        True,
    ),
    # afmoe
    (
        ("afmoe",),
        (
            "\\p{AFMoE_digits}",
            "[一-鿿㐀-䶿豈-\ufaff\u3040-ゟ゠-ヿ･-ﾟ⼀-\u2fdfเ-\u0e7f\u0e80-\u0effក-\u17ffက-႟ꩠ-ꩿꧠ-\ua9ff가-\ud7afᄀ-ᇿ]+",
            "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        ),
        True,
    ),
    # laguna
    (
        ("laguna",),
        (
            "[^\\n]+|[\\n]+",
            "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        ),
        True,
    ),
    # exaone_moe
    (
        ("exaone_moe",),
        (
            "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
        ),
        True,
    ),
    # gemma4
    (
        ("gemma4",),
        ("[^\\n]+|[\\n]+",),
        False,
    ),
    # sarvam_moe
    (
        ("sarvam_moe",),
        ("[^\\n]+|[\\n]+",),
        False,
    ),
    # minicpm5
    (
        ("minicpm5",),
        (
            "\\p{N}{1,3}",
            "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        ),
        True,
    ),
    # whitespace
    (
        ("whitespace",),
        ("\\S+",),
        False,
    ),
    # default
    (
        ("default",),
        (
            "[\\p{P}\\$\\+<=>\\^~\\|]+",
            "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
            "\\p{N}+",
            "[0-9][0-9][0-9]",
        ),
        True,
    ),
)

REGEX_LISTS: dict[str, tuple[str, ...]] = {t: regexes for types, regexes, _ in _LISTS for t in types}
BYTE_ENCODE: dict[str, bool] = {t: byte_encode for types, _, byte_encode in _LISTS for t in types}

# Tokenizer flags llama.cpp's load sets for a BPE vocabulary before the pre name's own changes.
BPE_DEFAULT_FLAGS: Mapping[str, bool] = {"add_space_prefix": False, "escape_whitespaces": False, "clean_spaces": True}

_NO_CLEAN = {"clean_spaces": False}
_IGNORE = {"ignore_merges": True}


def _names(pre: str, names: str, **flags: object) -> dict[str, tuple[str, dict[str, object]]]:
    return {name: (pre, flags) for name in names.split()}


# tokenizer.ggml.pre -> (pre type, flags llama.cpp sets for that name), in load's order. A flag
# ``bos=None`` clears the default BOS id (chatglm), ``lowercase`` is the BERT normalizer option.
PRE_NAMES: dict[str, tuple[str, dict[str, object]]] = {
    **_names("default", "default"),
    **_names("minicpm5", "minicpm5", **_IGNORE),
    **_names(
        "llama3",
        "llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano",
        ignore_merges=True,
        add_bos=True,
    ),
    **_names("deepseek_llm", "deepseek-llm", **_NO_CLEAN),
    **_names("deepseek_coder", "deepseek-coder", **_NO_CLEAN),
    **_names("deepseek3_llm", "deepseek-v3", **_NO_CLEAN),
    **_names("spark2_5", "spark2_5", **_NO_CLEAN),
    **_names("youtu", "youtu", clean_spaces=False, ignore_merges=True),
    **_names("falcon", "falcon"),
    **_names("mpt", "mpt"),
    **_names("starcoder", "starcoder"),
    **_names("gpt2", "gpt-2 phi-2 jina-es jina-de gigachat jina-v2-es jina-v2-de a.x-4.0 mellum modern-bert"),
    **_names("jais2", "jais-2"),
    **_names("gemma4", "gemma4 granite-embed-multi-311m", escape_whitespaces=True),
    **_names("sarvam_moe", "sarvam-moe", escape_whitespaces=True, clean_spaces=False),
    **_names("gpt2", "jina-v1-en jina-v2-code roberta-bpe", add_sep=True),
    **_names("whitespace", "whitespace", lowercase=False),
    **_names("refact", "refact"),
    **_names("command_r", "command-r", **_NO_CLEAN),
    **_names("qwen2", "qwen2 deepseek-r1-qwen kormo f2llmv2", **_NO_CLEAN),
    **_names("qwen35", "qwen35", **_NO_CLEAN),
    **_names("stablelm2", "stablelm2"),
    **_names("olmo", "olmo"),
    **_names("dbrx", "dbrx"),
    **_names("smaug", "smaug-bpe"),
    **_names("poro", "poro-chat", **_NO_CLEAN),
    **_names("chatglm4", "chatglm-bpe", bos=None),
    **_names("chatglm4", "glm4 glm5", bos=None, ignore_merges=True),
    **_names("viking", "viking", **_NO_CLEAN),
    **_names("jais", "jais"),
    **_names("tekken", "tekken", clean_spaces=False, ignore_merges=True, add_bos=True),
    **_names("smollm", "smollm", **_NO_CLEAN),
    **_names("codeshell", "codeshell"),
    **_names("bloom", "bloom"),
    **_names("gpt3_finnish", "gpt3-finnish"),
    **_names("exaone", "exaone"),
    **_names("gpt2", "exaone4"),
    **_names("exaone_moe", "exaone-moe"),
    **_names("chameleon", "chameleon", add_bos=True, clean_spaces=False),
    **_names("minerva", "minerva-7b"),
    **_names("qwen2", "megrez"),
    **_names("gpt4o", "gpt-4o llama4 kanana2 talkie", **_NO_CLEAN),
    **_names("granite_emb_multi", "granite-embed-multi-97m", clean_spaces=False, ignore_merges=True),
    **_names("tiny_aya", "tiny_aya cohere2moe", **_NO_CLEAN),
    **_names("superbpe", "superbpe", **_NO_CLEAN),
    **_names("trillion", "trillion", **_NO_CLEAN),
    **_names("granite_docling", "granite-docling", **_NO_CLEAN),
    **_names("bailingmoe", "bailingmoe bailingmoe2 llada-moe", **_NO_CLEAN),
    **_names("seed_coder", "seed-coder", **_NO_CLEAN),
    **_names("hunyuan", "hunyuan", **_NO_CLEAN),
    **_names("hunyuan_dense", "hunyuan-dense", **_NO_CLEAN),
    **_names("hy_v4", "hy_v4", **_NO_CLEAN),
    **_names("joyai_llm", "joyai-llm", **_NO_CLEAN),
    **_names("kimi_k2", "kimi-k2", **_NO_CLEAN),
    **_names("ufakzeka", "ufakzeka", **_NO_CLEAN),
    **_names("grok_2", "grok-2", **_NO_CLEAN),
    **_names("afmoe", "afmoe", **_NO_CLEAN),
    **_names("laguna", "laguna", **_NO_CLEAN),
    **_names("minimax_m2", "minimax-m2", **_NO_CLEAN),
    **_names("solar_open", "solar-open", **_NO_CLEAN),
    **_names("mellum2", "mellum2"),
}
# the missing key (or an empty string): llama.cpp warns and uses the default pre type
MISSING_PRE = ("default", {})


def resolve_pre(name: object) -> tuple[str, dict[str, object]]:
    """The pre type and flags of a ``tokenizer.ggml.pre`` value (None: the key is missing).

    Raises:
        ValidationError: the value is not a string, or a name llama.cpp does not map (it refuses
            such a file too: "unknown pre-tokenizer type").
    """
    if name is None or name == "":
        return MISSING_PRE
    if not isinstance(name, str):
        raise ValidationError("gguf.kv['tokenizer.ggml.pre']", f"{name!r} is not a string")
    if name not in PRE_NAMES:
        raise ValidationError(
            "gguf.kv['tokenizer.ggml.pre']",
            f"unknown pre-tokenizer type {name!r} (llama.cpp refuses it too)",
            code="unsupported_tokenizer",
        )
    return PRE_NAMES[name]
