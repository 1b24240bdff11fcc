"""Where a URL leads: the fsspec filesystem that reads or writes it (s3://, gs://, az://,
hf://, http(s)://, …), with SUMMARIZE_STORAGE_OPTIONS, and the pip extra to install when
its library is missing. Corpora are read from URLs by jobs/objects.py, results written to
them by readers/export.py."""

from __future__ import annotations

import re

from core.errors import SummarizeError

EXTRAS = {  # the pip extra that brings each protocol's library
    **dict.fromkeys(("s3", "s3a"), "s3"),
    **dict.fromkeys(("gs", "gcs"), "gcs"),
    **dict.fromkeys(("az", "abfs", "abfss", "adl"), "azure"),
    **dict.fromkeys(("http", "https"), "http"),
    "hf": "hf",
}
STORAGE_LIBRARIES = (
    "botocore",
    "aiobotocore",
    "s3fs",
    "gcsfs",
    "google",
    "adlfs",
    "azure",
    "aiohttp",
)
_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


def is_url(path: str) -> bool:
    """A path given as a URL (`s3://bucket/prefix/`), not a local file or folder."""
    return bool(_URL.match(path))


def filesystem(url: str, options: dict[str, dict]):
    """The fsspec filesystem for `url` and the path within it; refused (with the fix) when the
    library for its protocol is not installed, or the protocol is unknown."""
    import fsspec

    protocol = url.split("://", 1)[0].lower()
    try:
        return fsspec.core.url_to_fs(url, **options.get(protocol, {}))
    except ImportError:
        extra = EXTRAS.get(protocol)
        fix = f"pip install 'summarize[{extra}]'" if extra else "install fsspec's library for it"
        raise SummarizeError(f"{protocol}:// needs its storage library: {fix}.") from None
    except ValueError as exc:
        if "Protocol not known" in str(exc):
            raise SummarizeError(
                f"{protocol}:// is not a kind of storage summarize can use: use s3://, gs://, "
                "az://, abfs://, hf://, http(s)://, file:// or a local path."
            ) from None
        raise SummarizeError(_refused_options(protocol, exc)) from None
    except TypeError as exc:  # an option the filesystem does not take
        raise SummarizeError(_refused_options(protocol, exc)) from None


def _refused_options(protocol: str, exc: Exception) -> str:
    return (
        f"The {protocol}:// storage refused its options ({type(exc).__name__}): check "
        f"SUMMARIZE_STORAGE_OPTIONS[{protocol!r}] against the library's documentation."
    )
