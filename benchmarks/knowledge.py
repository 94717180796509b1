"""Knowledge bases: ingestion throughput, query latency, index size and retrieval quality.

* ingestion: `Knowledge.add` of a folder of 1,000 generated Markdown files (one page each, about
  450 words under two headings) and of 100 generated PDFs (fpdf2, 5 pages each), in pages per
  second, on SQLite and on PostgreSQL; no embedder (BM25 only), so this is reading, parsing,
  chunking and indexing.
* query latency: p50 / p99 of `Knowledge.search` (k=5) over kbs of 10k and 100k chunks (1M with
  ``--full``: long, and several GB on disk), BM25 ("text") and hybrid (BM25 + vectors, fused by
  reciprocal rank). The chunks are generated (60 words of a Zipf-distributed 20k-word vocabulary)
  and written with the store's `upsert` directly, 100 per document; queries are 2 to 3 words of the
  same vocabulary. Vectors come from a deterministic local fake embedder (the hashing trick: each
  word adds ±1 to one of 256 dimensions, chosen by its blake2b hash), so no model or network is
  involved and the numbers measure the store. SQLite ranks vectors with sqlite-vec where it loads
  (else a Python scan); PostgreSQL with pgvector where installed, else in a worker thread over the
  kb's float32 vectors (the fallback; this machine's PostgreSQL has no pgvector).
* index size on disk: the SQLite file (with its WAL), or the PostgreSQL tables with their indexes
  and TOAST (`pg_total_relation_size`), after writing the chunks (with vectors).
* recall@5 of BM25 on the labelled questions about docs/ of tests/unit/knowledge/test_recall.py.

PostgreSQL is skipped when 127.0.0.1:5432 does not answer. Prints tables and writes
benchmarks/results/knowledge.json (``--quick``: 200 Markdown files, 20 PDFs, 10k chunks, fewer
queries, written to knowledge-quick.json so committed results are never replaced by a quick run).
Run: `.venv/bin/python benchmarks/knowledge.py [--quick] [--full] [--backends sqlite,postgres]`.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import hashlib
import importlib.util
import json
import math
import os
import platform
import random
import shutil
import socket
import statistics
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentrt.knowledge import Chunk, Document, Knowledge, KnowledgeStore

ROOT = Path(__file__).parents[1]
RESULTS = Path(__file__).parent / "results"
TMP = Path(tempfile.mkdtemp(prefix="agentrt-bench-kb-"))
atexit.register(shutil.rmtree, TMP, ignore_errors=True)
POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
DIMS = 256
VOCAB = 20_000
WORDS_PER_CHUNK = 60
CHUNKS_PER_DOC = 100


# -- generated data ------------------------------------------------------------------------------------------
def _word(i: int) -> str:
    """A pronounceable pseudo-word for vocabulary index `i` (distinct for distinct i)."""
    consonants, vowels = "bcdfghjklmnprstvz", "aeiou"
    out = []
    n = i + 1
    while n:
        n, r = divmod(n, len(consonants) * len(vowels))
        out.append(consonants[r % len(consonants)] + vowels[r // len(consonants)])
    return "".join(out)


WORDS = [_word(i) for i in range(VOCAB)]
_WEIGHTS = [1 / (rank + 1) ** 1.05 for rank in range(VOCAB)]
_CUMULATIVE = list(__import__("itertools").accumulate(_WEIGHTS))


def _sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choices(WORDS, cum_weights=_CUMULATIVE, k=n))


def hashing_embed(texts: list[str]) -> list[list[float]]:
    """The deterministic fake embedder: each word adds ±1 to the dimension its blake2b hash picks."""
    out = []
    for text in texts:
        vector = [0.0] * DIMS
        for word in text.lower().split():
            digest = hashlib.blake2b(word.encode(), digest_size=4).digest()
            index = int.from_bytes(digest[:3], "big") % DIMS
            vector[index] += 1.0 if digest[3] & 1 else -1.0
        out.append(vector)
    return out


def _markdown_files(folder: Path, count: int) -> int:
    rng = random.Random(1)
    folder.mkdir(parents=True)
    for i in range(count):
        body = "\n\n".join(_sentence(rng, 75) + "." for _ in range(3))
        more = "\n\n".join(_sentence(rng, 75) + "." for _ in range(3))
        (folder / f"doc{i:04d}.md").write_text(f"# Document {i}\n\n## Part one\n\n{body}\n\n## Part two\n\n{more}\n")
    return count


def _pdf_files(folder: Path, count: int, pages: int = 5) -> int:
    from fpdf import FPDF

    rng = random.Random(2)
    folder.mkdir(parents=True)
    for i in range(count):
        pdf = FPDF()
        pdf.set_font("Helvetica", size=11)
        for _ in range(pages):
            pdf.add_page()
            pdf.multi_cell(0, 6, "\n\n".join(_sentence(rng, 80) + "." for _ in range(5)))
        pdf.output(str(folder / f"doc{i:03d}.pdf"))
    return count * pages


# -- stores --------------------------------------------------------------------------------------------------
def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def _make_store(backend: str, tag: str) -> KnowledgeStore:
    if backend == "sqlite":
        from agentrt.knowledge.stores.sqlite import SqliteKnowledgeStore

        return SqliteKnowledgeStore(TMP / f"{tag}.db")
    from agentrt.knowledge.stores.postgres import PostgresKnowledgeStore

    return PostgresKnowledgeStore(POSTGRES_URL, table_prefix=f"bench_{tag}_{uuid.uuid4().hex[:6]}")


async def _size(store: KnowledgeStore, backend: str, tag: str) -> int:
    if backend == "sqlite":
        base = TMP / f"{tag}.db"
        return sum(p.stat().st_size for p in (base, Path(f"{base}-wal")) if p.exists())
    import sqlalchemy as sa

    engine = store.engine  # type: ignore[attr-defined]
    async with engine.connect() as conn:
        total = 0
        for table in (store.documents_table, store.chunks_table):  # type: ignore[attr-defined]
            total += (await conn.execute(sa.text(f"SELECT pg_total_relation_size('{table}')"))).scalar_one()
    return int(total)


async def _dispose(store: KnowledgeStore) -> None:
    drop = getattr(store, "drop_tables", None)
    if drop is not None:
        await drop()
    await store.close()


def _engine(store: KnowledgeStore) -> str:
    engine = getattr(store, "vector_engine", None)
    if engine is not None:
        return str(engine)
    return "pgvector" if getattr(store, "pgvector", False) else "worker thread (no pgvector)"


# -- ingestion -----------------------------------------------------------------------------------------------
async def bench_ingest(backend: str, markdown: int, pdfs: int) -> dict[str, Any]:
    md_dir, pdf_dir = TMP / f"md-{backend}", TMP / f"pdf-{backend}"
    md_pages = _markdown_files(md_dir, markdown)
    pdf_pages = _pdf_files(pdf_dir, pdfs)
    store = _make_store(backend, f"ingest_{backend}")
    out: dict[str, Any] = {"backend": backend}
    try:
        kb = Knowledge("bench", store=store)
        for kind, folder, pages in (("markdown", md_dir, md_pages), ("pdf", pdf_dir, pdf_pages)):
            t0 = time.perf_counter()
            report = await kb.add(folder)
            seconds = time.perf_counter() - t0
            assert not report.failed, report.failed[:3]
            t1 = time.perf_counter()
            again = await kb.add(folder)
            unchanged = time.perf_counter() - t1
            assert len(again.skipped) == len(report.added)
            out[kind] = {
                "files": len(report.added),
                "pages": pages,
                "chunks": report.chunks,
                "seconds": round(seconds, 2),
                "pages_per_s": round(pages / seconds, 1),
                "unchanged_readd_s": round(unchanged, 2),
            }
    finally:
        await _dispose(store)
    return out


# -- queries -------------------------------------------------------------------------------------------------
async def _fill(store: KnowledgeStore, chunks: int, *, vectors: bool) -> None:
    rng = random.Random(3)
    docs = math.ceil(chunks / CHUNKS_PER_DOC)
    for d in range(docs):
        source = f"gen/{d:06d}.md"
        texts = [_sentence(rng, WORDS_PER_CHUNK) for _ in range(min(CHUNKS_PER_DOC, chunks - d * CHUNKS_PER_DOC))]
        embeddings: Sequence[Sequence[float] | None] = hashing_embed(texts) if vectors else [None] * len(texts)
        items = [
            Chunk(
                chunk_id=hashlib.sha256(f"{source}|{i}".encode()).hexdigest()[:32],
                source=source,
                ordinal=i,
                text=text,
                heading_path=(f"Document {d}",),
                tokens=WORDS_PER_CHUNK,
                embedding=None if vector is None else tuple(vector),
            )
            for i, (text, vector) in enumerate(zip(texts, embeddings, strict=True))
        ]
        document = Document(source, f"Document {d}", f"h{d}", {"tags": ["bench"]}, len(items), time.time())
        await store.upsert("bench", "kb", document, items)


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]
    return statistics.median(ordered) * 1000, p99 * 1000


async def bench_queries(backend: str, chunks: int, queries: int, hybrid_queries: int) -> dict[str, Any]:
    tag = f"q{chunks}_{backend}"
    store = _make_store(backend, tag)
    try:
        t0 = time.perf_counter()
        await _fill(store, chunks, vectors=True)
        fill = time.perf_counter() - t0
        size = await _size(store, backend, tag)
        kb = Knowledge("kb", store=store, namespace="bench", embedder=hashing_embed)
        rng = random.Random(4)
        # Query words from the frequent half of the vocabulary's mass, as real queries mostly are.
        pool = WORDS[:2000]
        out: dict[str, Any] = {
            "backend": backend,
            "chunks": chunks,
            "fill_s": round(fill, 1),
            "size_mb": round(size / 1e6, 1),
            "bytes_per_chunk": round(size / chunks),
        }
        for mode, count in (("text", queries), ("hybrid", hybrid_queries)):
            texts = [" ".join(rng.sample(pool, rng.choice((2, 3)))) for _ in range(count)]
            await kb.search(texts[0], 5, mode=mode)  # warm up (connections, caches)
            samples = []
            empty = 0
            for text in texts:
                t = time.perf_counter()
                found = await kb.search(text, 5, mode=mode)
                samples.append(time.perf_counter() - t)
                empty += not found
            p50, p99 = _percentiles(samples)
            out[mode] = {"queries": count, "p50_ms": round(p50, 2), "p99_ms": round(p99, 2), "empty": empty}
        out["vector_engine"] = _engine(store)
    finally:
        await _dispose(store)
    return out


# -- recall --------------------------------------------------------------------------------------------------
async def bench_recall() -> dict[str, Any]:
    path = ROOT / "tests" / "unit" / "knowledge" / "test_recall.py"
    spec = importlib.util.spec_from_file_location("knowledge_recall_set", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    async with Knowledge("docs", store=f"sqlite:///{TMP / 'recall.db'}") as kb:
        await kb.add(ROOT / "docs")
        recall, missed = await module.recall_at(kb, 5)
    return {"questions": len(module.QUESTIONS), "recall_at_5": round(recall, 3), "missed": missed}


# -- main ----------------------------------------------------------------------------------------------------
def _print_tables(result: dict[str, Any]) -> None:
    print("\nIngestion (no embedder; pages/s, re-adding the unchanged folder in s)")
    print(
        f"{'backend':10} {'format':9} {'files':>6} {'pages':>6} {'chunks':>7} {'s':>7} {'pages/s':>8} {'re-add s':>9}"
    )
    for row in result["ingestion"]:
        for kind in ("markdown", "pdf"):
            r = row[kind]
            print(
                f"{row['backend']:10} {kind:9} {r['files']:>6} {r['pages']:>6} {r['chunks']:>7} {r['seconds']:>7} "
                f"{r['pages_per_s']:>8} {r['unchanged_readd_s']:>9}"
            )
    print("\nQuery latency, k=5 (ms), and index size on disk")
    print(
        f"{'backend':10} {'chunks':>8} {'bm25 p50':>9} {'bm25 p99':>9} {'hybrid p50':>11} {'hybrid p99':>11} "
        f"{'MB':>7} {'B/chunk':>8}  vectors"
    )
    for r in result["queries"]:
        print(
            f"{r['backend']:10} {r['chunks']:>8} {r['text']['p50_ms']:>9} {r['text']['p99_ms']:>9} "
            f"{r['hybrid']['p50_ms']:>11} {r['hybrid']['p99_ms']:>11} {r['size_mb']:>7} {r['bytes_per_chunk']:>8}  "
            f"{r['vector_engine']}"
        )
    recall = result["recall"]
    print(f"\nBM25 recall@5 on {recall['questions']} questions about docs/: {recall['recall_at_5']}")


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    backends = [b for b in args.backends.split(",") if b]
    if "postgres" in backends and not _reachable("127.0.0.1", 5432):
        print("postgres: not reachable on 127.0.0.1:5432, skipped")
        backends.remove("postgres")
    markdown, pdfs = (200, 20) if args.quick else (1000, 100)
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else ([10_000] if args.quick else [10_000, 100_000])
    if args.full:
        sizes.append(1_000_000)
    result: dict[str, Any] = {"ingestion": [], "queries": []}
    for backend in backends:
        print(f"ingesting on {backend} ...", flush=True)
        result["ingestion"].append(await bench_ingest(backend, markdown, pdfs))
    for size in sizes:
        for backend in backends:
            queries = 50 if args.quick else 200
            # Hybrid without an ANN index scans every vector: fewer queries at the larger sizes.
            hybrid = max(10, min(queries, 2_000_000 // size))
            print(f"querying {size} chunks on {backend} ...", flush=True)
            result["queries"].append(await bench_queries(backend, size, queries, hybrid))
    result["recall"] = await bench_recall()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer files, 10k chunks, fewer queries")
    parser.add_argument("--full", action="store_true", help="also 1M chunks (long; several GB on disk)")
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--sizes", default=None, help="comma-separated chunk counts (overrides the defaults)")
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    result["meta"] = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "quick": args.quick,
        "embedder": f"hashing trick, {DIMS} dims (blake2b), deterministic, local",
    }
    _print_tables(result)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / ("knowledge-quick.json" if args.quick else "knowledge.json")
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
