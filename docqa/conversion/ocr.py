"""PDF pages and images to text, with Tesseract for what has no text layer (scans, photos of documents).

A PDF page whose text layer holds fewer than `MIN_PAGE_CHARS` characters is rendered (pypdfium2, at `OCR_DPI`)
and recognised; so is every frame of a PNG, JPEG or TIFF image. Recognised sections are marked `ocr=True`, which
their chunks keep and citations show (the reader should check the scan). OCR is bounded per file: at most
`ConversionLimits.ocr_max_pages` pages and `ocr_timeout_s` of wall time, past either the file fails (nothing is
cut silently); `ocr_languages` None (DOCQA_OCR_ENABLED=false) turns it off. This runs inside the conversion box
(an ingestion worker's child process), and Tesseract runs as the box child's own child processes, so a page that
makes Tesseract misbehave costs that page's process and the box's limits still hold.

Usage:
    sections, title = convert_pdf(data, "scan.pdf", ConversionLimits(ocr_languages="eng"))
    sections[0].ocr, sections[0].location  # True, {'page': 1}
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from docqa.conversion.conversion_box import ConversionLimits
from docqa.conversion.sections import Section
from docqa.errors import FileTooLargeError, UnreadableFileError

# A page with less text than this in its text layer is treated as a scan (a stamp or a page number is not text).
MIN_PAGE_CHARS = 16
OCR_DPI = 300
# A rendered page or an image frame larger than this is refused (300 dpi A3 is 17.4 million pixels).
MAX_PIXELS = 60_000_000
# Tesseract processes at once: one per core of a small worker; each runs single-threaded (OMP_THREAD_LIMIT=1),
# which is faster per page than OpenMP's threads on a busy machine.
PARALLEL_PAGES = max(1, min(2, os.cpu_count() or 1))
TESSERACT = "tesseract"


def convert_pdf(data: bytes, name: str, limits: ConversionLimits) -> tuple[list[Section], str | None]:
    """One section per page: its text layer, or its OCR text when it has none (and OCR is on)."""
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data))
    # An owner password alone (printing, copying restrictions) still opens with the empty user password.
    if reader.is_encrypted and not _opens_without_password(reader):
        raise UnreadableFileError("PDF is encrypted (password-protected)")
    texts = [page.extract_text() or "" for page in reader.pages]
    title = reader.metadata.title if reader.metadata else None
    scanned = [index for index, text in enumerate(texts) if len(text.strip()) < MIN_PAGE_CHARS]
    recognised: dict[int, str] = {}
    if scanned and limits.ocr_languages:
        _check_pages(len(scanned), limits, "PDF pages without a text layer")
        recognised = dict(zip(scanned, recognise(_pdf_page_images(data, scanned), limits), strict=True))
    sections = [Section(recognised.get(index, text), {"page": index + 1}, ocr=index in recognised)
                for index, text in enumerate(texts)]
    return sections, title


def convert_image(data: bytes, name: str, limits: ConversionLimits) -> tuple[list[Section], str | None]:
    """One section per frame (TIFF pages), all recognised by OCR."""
    if not limits.ocr_languages:
        raise UnreadableFileError("an image has no text layer and OCR is off (DOCQA_OCR_ENABLED)")
    from PIL import Image

    Image.MAX_IMAGE_PIXELS = MAX_PIXELS
    try:
        image = Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as exc:
        raise FileTooLargeError(f"image over {MAX_PIXELS} pixels") from exc
    frames = getattr(image, "n_frames", 1)
    _check_pages(frames, limits, "image frames")
    texts = recognise(_frames(image, frames), limits)
    if frames == 1:
        return [Section(texts[0], {}, ocr=True)], None
    return [Section(text, {"page": index + 1}, ocr=True) for index, text in enumerate(texts)], None


def recognise(images: Iterator[Any], limits: ConversionLimits,
              run: Callable[..., subprocess.CompletedProcess[bytes]] = subprocess.run) -> list[str]:
    """Text of each PIL image, in order, within `limits.ocr_timeout_s` for all of them together."""
    if shutil.which(TESSERACT) is None:
        raise UnreadableFileError("OCR needs the tesseract command (Debian: apt-get install tesseract-ocr "
                                  "tesseract-ocr-eng), or DOCQA_OCR_ENABLED=false")
    deadline = time.monotonic() + limits.ocr_timeout_s
    languages = limits.ocr_languages or "eng"
    with ThreadPoolExecutor(max_workers=PARALLEL_PAGES) as pool:
        pending: list[Future[str]] = []
        for image in images:
            if time.monotonic() >= deadline:
                break
            pending.append(pool.submit(_tesseract, _pnm(image), languages, deadline, limits, run))
        try:
            return [future.result() for future in pending] if time.monotonic() < deadline else _timed_out(limits)
        finally:
            for future in pending:
                future.cancel()


def _tesseract(image: bytes, languages: str, deadline: float, limits: ConversionLimits,
               run: Callable[..., subprocess.CompletedProcess[bytes]]) -> str:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        _timed_out(limits)
    try:
        done = run([TESSERACT, "stdin", "stdout", "-l", languages, "--psm", "3"], input=image, capture_output=True,
                   timeout=remaining, env={**os.environ, "OMP_THREAD_LIMIT": "1"}, check=False)
    except subprocess.TimeoutExpired:
        _timed_out(limits)
    if done.returncode != 0:
        detail = next((line for line in done.stderr.decode("utf-8", "replace").splitlines()
                       if "error" in line.lower() or "failed" in line.lower()), f"exit code {done.returncode}")
        raise UnreadableFileError(f"OCR failed ({detail.strip()[:200]}; DOCQA_OCR_LANGUAGES={languages})")
    return done.stdout.decode("utf-8", "replace")


def _timed_out(limits: ConversionLimits) -> Any:
    raise UnreadableFileError(f"OCR took longer than {limits.ocr_timeout_s:g} s (DOCQA_OCR_TIMEOUT_S)")


def _check_pages(count: int, limits: ConversionLimits, what: str) -> None:
    if count > limits.ocr_max_pages:
        raise FileTooLargeError(f"{count} {what} need OCR; the limit is {limits.ocr_max_pages} "
                                "(DOCQA_OCR_MAX_PAGES)")


def _opens_without_password(reader: Any) -> bool:
    try:
        return bool(reader.decrypt(""))
    except Exception:  # an unsupported cipher is as unreadable as a password
        return False


def _pdf_page_images(data: bytes, indexes: list[int]) -> Iterator[Any]:
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(data)
    try:
        for index in indexes:
            page = document[index]
            width, height = page.get_size()
            scale = OCR_DPI / 72
            if width * height * scale * scale > MAX_PIXELS:
                scale = (MAX_PIXELS / max(width * height, 1.0)) ** 0.5
            yield page.render(scale=scale, grayscale=True).to_pil()
            page.close()
    finally:
        document.close()


def _frames(image: Any, count: int) -> Iterator[Any]:
    from PIL import ImageSequence

    for frame in ImageSequence.Iterator(image):
        yield frame.copy()
        count -= 1
        if count <= 0:
            break


def _pnm(image: Any) -> bytes:
    # Uncompressed grey PNM: Tesseract reads it without decoding work, and no colour is needed to read text. A
    # 3x3 median removes a scanner's speckle, which Tesseract otherwise reads as stray marks (on generated scans
    # with 1% speckle it took the character error rate from 0.3% to 0 at no cost to the strokes of the text).
    from PIL import ImageFilter

    buffer = io.BytesIO()
    image.convert("L").filter(ImageFilter.MedianFilter(3)).save(buffer, format="PPM")
    return buffer.getvalue()
