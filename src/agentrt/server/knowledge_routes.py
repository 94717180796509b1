"""``/v1/knowledge``: each user's knowledge bases over HTTP (list, upload, delete, search, passage view).

Every route authenticates, and works in the namespace of the authenticated user only
(``knowledge.for_namespace(user_id)``): another user's knowledge base is one the caller does not
have (empty lists, 404), never a 403 that would confirm it exists. Knowledge base names in the URL
are checked like `Knowledge` names (422). Uploads (multipart ``file``) are size-limited while they
stream (413), their type is decided by a whitelisted extension (415), and their filename is never
used as a path: the bytes go to a private temporary folder under a generated name, and the
sanitised original name is only the document's ``source``. A JSON ``text`` is indexed as text,
never read as a path or fetched as a URL.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import shutil
import tempfile
import unicodedata
from collections.abc import AsyncGenerator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from agentrt.errors import InvalidTypeError, InvalidValueError, UserError
from agentrt.knowledge.filters import check_untrusted_filters
from agentrt.knowledge.knowledge import MAX_K, Knowledge, check_name
from agentrt.server._auth import Scope
from agentrt.server._errors import ApiError, InvalidParameterError, json_response
from agentrt.server._limits import BodyTooLargeError, id_problem, parse_uint, read_body

if TYPE_CHECKING:
    from agentrt.knowledge.base import AddReport, Document
    from agentrt.memory.retrieval import Passage
    from agentrt.server.context import ServerContext

__all__ = ["DEFAULT_MAX_UPLOAD_BYTES", "UPLOAD_SUFFIXES", "knowledge_openapi_paths", "knowledge_routes", "safe_name"]

DEFAULT_MAX_UPLOAD_BYTES = 20 * 1024 * 1024
"""Largest uploaded document (or JSON text body): 20 MiB."""
UPLOAD_SUFFIXES = frozenset({".md", ".markdown", ".txt", ".html", ".htm", ".pdf", ".docx"})
"""The file types an upload may have (by the extension of its filename)."""
MAX_QUERY_CHARS = 2_000
MAX_SOURCE_CHARS = 500
_MULTIPART_SLACK = 64 * 1024
"""Bytes of a multipart body besides the file (boundaries, headers, small fields)."""
_KB_PATTERN = r"^[A-Za-z0-9._@:-]{1,128}$"
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def safe_name(filename: str | None) -> str | None:
    """An uploaded file's name as a document source: its last path segment, NFC, without control characters.

    None when nothing usable is left. The result is a label, never a path on this machine.
    """
    if not filename:
        return None
    base = filename.replace("\\", "/").rsplit("/", 1)[-1]
    base = unicodedata.normalize("NFC", base)
    base = "".join(c for c in base if unicodedata.category(c)[0] != "C").strip().lstrip(".").strip()
    if not base:
        return None
    if len(base) > 200:
        stem, suffix = os.path.splitext(base)
        base = stem[: 200 - len(suffix[:20])] + suffix[:20]
    return base


def knowledge_routes(
    server: ServerContext, knowledge: Knowledge, *, max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES
) -> list[BaseRoute]:
    """The ``/v1/knowledge`` routes over `knowledge` (its namespace replaced by each caller's user id)."""
    if not isinstance(knowledge, Knowledge):
        raise UserError(f"knowledge must be an agentrt.knowledge.Knowledge, not {type(knowledge).__name__}")
    if isinstance(max_upload_bytes, bool) or not isinstance(max_upload_bytes, int) or max_upload_bytes < 1:
        raise UserError(f"max_upload_bytes must be a positive integer, not {max_upload_bytes!r}")
    api = KnowledgeRoutes(server, knowledge, max_upload_bytes)
    kb = "/v1/knowledge/{kb}"
    return [
        Route("/v1/knowledge", api.list_kbs, methods=["GET"]),
        Route(kb, api.drop_kb, methods=["DELETE"]),
        Route(kb + "/documents", api.list_documents, methods=["GET"]),
        Route(kb + "/documents", api.add_document, methods=["POST"]),
        Route(kb + "/documents", api.delete_document, methods=["DELETE"]),
        Route(kb + "/search", api.search, methods=["GET"]),
        Route(kb + "/chunks/{chunk_id}", api.get_chunk, methods=["GET"]),
    ]


class KnowledgeRoutes:
    """The handlers of the ``/v1/knowledge`` routes."""

    def __init__(self, server: ServerContext, knowledge: Knowledge, max_upload_bytes: int) -> None:
        self.server = server
        self.knowledge = knowledge
        self.max_upload_bytes = max_upload_bytes

    # -- helpers --------------------------------------------------------------------------------------------
    async def _user_kb(self, request: Request, scope: Scope, *, kb: str | None = None) -> Knowledge:
        """The caller's view of the knowledge base named in the URL (401, 403, 422)."""
        user_id = await self.server.authenticate(request, scope=scope)
        try:
            mine = self.knowledge.for_namespace(user_id)
        except InvalidValueError:
            raise ApiError(
                422,
                "this user id cannot own knowledge bases (user ids with knowledge must be 1 to 128 of A-Za-z0-9._@:-)",
                code="invalid_user_id",
            ) from None
        name = kb if kb is not None else request.path_params.get("kb")
        if name is None:
            return mine
        try:
            return mine.for_kb(check_name(name, "the knowledge base name"))
        except InvalidValueError as exc:
            raise ApiError(422, str(exc), code="invalid_kb", param="kb") from None

    # -- routes ---------------------------------------------------------------------------------------------
    async def list_kbs(self, request: Request) -> Response:
        mine = await self._user_kb(request, Scope.KNOWLEDGE_READ)
        names = await mine.store.kbs(mine.namespace)
        return json_response({"knowledge_bases": [{"name": n} for n in names], "default": self.knowledge.name})

    async def list_documents(self, request: Request) -> Response:
        kb = await self._user_kb(request, Scope.KNOWLEDGE_READ)
        return json_response({"kb": kb.name, "documents": [_document(d) for d in await kb.documents()]})

    async def drop_kb(self, request: Request) -> Response:
        kb = await self._user_kb(request, Scope.KNOWLEDGE_WRITE)
        if not await kb.drop():
            raise ApiError(404, "no such knowledge base", code="kb_not_found", param="kb")
        return Response(status_code=204)

    async def delete_document(self, request: Request) -> Response:
        kb = await self._user_kb(request, Scope.KNOWLEDGE_WRITE)
        source = _source_param(request.query_params.get("source"), "source")
        if source is None:
            raise InvalidParameterError(
                "query parameter 'source' names the document to delete", code="invalid_query_parameter", param="source"
            )
        # The store directly: a source is a stored key here, never resolved as a path on the server.
        if not await kb.store.delete(kb.namespace, kb.name, source):
            raise ApiError(404, "no such document in this knowledge base", code="document_not_found", param="source")
        return Response(status_code=204)

    async def search(self, request: Request) -> Response:
        kb = await self._user_kb(request, Scope.KNOWLEDGE_READ)
        query = request.query_params.get("q", "")
        if not query.strip() or len(query) > MAX_QUERY_CHARS or _CONTROL.search(query):
            raise InvalidParameterError(
                f"query parameter 'q' must be 1 to {MAX_QUERY_CHARS} characters of text",
                code="invalid_query_parameter",
                param="q",
            )
        k = _k_param(request.query_params.get("k"))
        filters: dict[str, Any] = {}
        sources = request.query_params.getlist("source")
        tags = request.query_params.getlist("tag")
        if sources:
            filters["source"] = sources
        if tags:
            filters["tags"] = tags
        try:  # an end user's filters: held to what the model's search tool is held to
            checked = check_untrusted_filters(filters or None)
        except (InvalidTypeError, InvalidValueError) as exc:
            raise InvalidParameterError(str(exc), code="invalid_query_parameter", param="source") from None
        found = await kb.search(query, k, checked)
        return json_response({"kb": kb.name, "query": query, "passages": [_passage(p, with_score=True) for p in found]})

    async def get_chunk(self, request: Request) -> Response:
        kb = await self._user_kb(request, Scope.KNOWLEDGE_READ)
        chunk_id = request.path_params["chunk_id"]
        passage = None if id_problem("chunk id", chunk_id) else await kb.chunk(chunk_id)
        if passage is None:
            raise ApiError(404, "no such passage in this knowledge base", code="chunk_not_found", param="chunk_id")
        return json_response({"kb": kb.name, **_passage(passage)})

    async def add_document(self, request: Request) -> Response:
        kb = await self._user_kb(request, Scope.KNOWLEDGE_WRITE)
        self.server.ensure_accepting()
        kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if kind == "application/json":
            report = await self._add_json(request, kb)
        elif kind == "multipart/form-data":
            report = await self._add_upload(request, kb)
        else:
            raise ApiError(
                415,
                "send the document as JSON {'text': ...} or as a multipart/form-data upload in the field 'file'",
                code="unsupported_media_type",
            )
        if report.failed and not report.added and not report.skipped:
            reason = report.failed[0][1]
            raise ApiError(422, f"the document could not be read: {reason}", code="unreadable_document")
        return json_response(_report(kb.name, report), 201 if report.added else 200)

    async def _add_json(self, request: Request, kb: Knowledge) -> AddReport:
        try:
            raw = await read_body(request, self.max_upload_bytes)
        except BodyTooLargeError:
            raise _too_large(self.max_upload_bytes) from None
        from agentrt import _json

        try:
            data = _json.loads(raw) if raw.strip() else None
        except ValueError as exc:
            raise ApiError(400, f"the request body is not valid JSON: {exc}", code="invalid_json") from None
        if not isinstance(data, dict):
            raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
        text = data.get("text")
        if not isinstance(text, str) or not text.strip():
            raise _invalid("'text' must be a non-empty string: the document's text", "text")
        source = _source_param(data.get("source"), "source")
        metadata = _metadata(data.get("metadata"))
        try:
            return await kb.add_text(text, source=source, metadata=metadata)
        except (InvalidValueError, InvalidTypeError) as exc:
            raise _invalid(str(exc), "metadata") from None

    async def _add_upload(self, request: Request, kb: Knowledge) -> AddReport:
        from starlette.datastructures import UploadFile
        from starlette.formparsers import MultiPartException, MultiPartParser

        limit = self.max_upload_bytes
        parser = MultiPartParser(
            request.headers, _limited(request, limit + _MULTIPART_SLACK), max_files=1, max_fields=4
        )
        try:
            form = await parser.parse()
        except BodyTooLargeError:
            raise _too_large(limit) from None
        except MultiPartException as exc:
            raise ApiError(400, f"malformed multipart body: {exc.message}", code="invalid_multipart") from None
        try:
            upload = form.get("file")
            if not isinstance(upload, UploadFile):
                raise _invalid("a multipart upload sends the document in the field 'file'", "file")
            name = safe_name(upload.filename)
            suffix = Path(name).suffix.lower() if name else ""
            if name is None or suffix not in UPLOAD_SUFFIXES:
                allowed = ", ".join(sorted(UPLOAD_SUFFIXES))
                raise ApiError(415, f"unsupported file type: upload one of {allowed}", code="unsupported_file_type")
            meta_field = form.get("metadata")
            metadata = _metadata(_json_field(meta_field) if isinstance(meta_field, str) and meta_field else None)
            return await self._add_file(kb, upload, name, suffix, metadata)
        finally:
            await form.close()

    async def _add_file(
        self, kb: Knowledge, upload: Any, name: str, suffix: str, metadata: dict[str, Any] | None
    ) -> AddReport:
        folder = await asyncio.to_thread(tempfile.mkdtemp, prefix="agentrt-upload-")  # 0700, a random name
        path = Path(folder) / f"upload{suffix}"  # generated: the client's filename is never a path here
        try:
            if not await asyncio.to_thread(_save, upload.file, path, self.max_upload_bytes):
                raise _too_large(self.max_upload_bytes)
            report = await kb.add(path, source=name, metadata=metadata)
        finally:
            await asyncio.to_thread(shutil.rmtree, folder, True)
        # A reason may quote the file it could not read: name the upload, not the temporary path.
        failed = tuple((source, reason.replace(str(path), name)) for source, reason in report.failed)
        return dataclasses.replace(report, failed=failed)


def _save(source: BinaryIO, path: Path, limit: int) -> bool:
    """Copy an upload to a new file at `path`; False (and nothing kept) when it is over `limit` bytes."""
    source.seek(0)
    size = 0
    with path.open("xb") as out:
        while chunk := source.read(256 * 1024):
            size += len(chunk)
            if size > limit:
                return False
            out.write(chunk)
    return True


# -- request parsing -----------------------------------------------------------------------------------------
async def _limited(request: Request, limit: int) -> AsyncGenerator[bytes, None]:
    """The body's chunks, refusing (`BodyTooLargeError`) past `limit` bytes, declared or streamed."""
    declared = parse_uint(request.headers.get("content-length", ""))
    if declared is not None and declared > limit:
        raise BodyTooLargeError(limit)
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLargeError(limit)
        yield chunk


def _too_large(limit: int) -> ApiError:
    return ApiError(413, f"the document is larger than the {limit} bytes allowed", code="request_too_large")


def _invalid(message: str, param: str) -> ApiError:
    return ApiError(422, message, code="validation_error", param=param)


def _json_field(value: str) -> Any:
    from agentrt import _json

    try:
        return _json.loads(value)
    except ValueError:
        raise _invalid("the field 'metadata' must be a JSON object", "metadata") from None


def _metadata(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise _invalid("'metadata' must be a JSON object", "metadata")
    return dict(value)


def _source_param(value: Any, param: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_SOURCE_CHARS or _CONTROL.search(value):
        raise _invalid(f"'{param}' must be 1 to {MAX_SOURCE_CHARS} characters without control characters", param)
    return value


def _k_param(raw: str | None) -> int:
    if raw is None:
        return 5
    value = parse_uint(raw, max_digits=4)
    if value is None or not 1 <= value <= MAX_K:
        raise InvalidParameterError(
            f"query parameter 'k' must be an integer from 1 to {MAX_K}", code="invalid_query_parameter", param="k"
        )
    return value


# -- response bodies -----------------------------------------------------------------------------------------
def _document(document: Document) -> dict[str, Any]:
    return {
        "source": document.source,
        "title": document.title,
        "content_hash": document.content_hash,
        "metadata": dict(document.metadata),
        "chunk_count": document.chunk_count,
        "added_at": document.added_at,
    }


def _passage(passage: Passage, *, with_score: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "chunk_id": passage.chunk_id,
        "text": passage.text,
        "source": passage.source,
        "title": passage.title,
        "location": passage.location,
    }
    if with_score:
        out["score"] = passage.score
    return out


def _report(kb: str, report: AddReport) -> dict[str, Any]:
    return {
        "kb": kb,
        "added": list(report.added),
        "skipped": list(report.skipped),
        "failed": [{"source": source, "reason": reason} for source, reason in report.failed],
        "chunks": report.chunks,
    }


# -- OpenAPI -------------------------------------------------------------------------------------------------
def knowledge_openapi_paths() -> dict[str, Any]:
    """The OpenAPI paths of the knowledge routes (added to ``/openapi.json`` when they are served)."""
    from agentrt.server._openapi import error_responses

    kb_param = {
        "name": "kb",
        "in": "path",
        "required": True,
        "description": "The knowledge base's name (the caller's own; 1 to 128 of A-Za-z0-9._@:-).",
        "schema": {"type": "string", "pattern": _KB_PATTERN},
    }
    nullable = {"type": ["string", "null"]}
    passage = {
        "type": "object",
        "required": ["chunk_id", "text", "source", "title", "location"],
        "properties": {
            "chunk_id": {"type": "string"},
            "text": {"type": "string"},
            "source": {"type": "string"},
            "title": nullable,
            "location": nullable,
            "score": {"type": "number"},
            "kb": {"type": "string"},
        },
    }
    document = {
        "type": "object",
        "required": ["source", "title", "content_hash", "metadata", "chunk_count", "added_at"],
        "properties": {
            "source": {"type": "string"},
            "title": nullable,
            "content_hash": {"type": "string"},
            "metadata": {"type": "object"},
            "chunk_count": {"type": "integer"},
            "added_at": {"type": "number"},
        },
    }
    report = {
        "type": "object",
        "required": ["kb", "added", "skipped", "failed", "chunks"],
        "properties": {
            "kb": {"type": "string"},
            "added": {"type": "array", "items": {"type": "string"}},
            "skipped": {"type": "array", "items": {"type": "string"}},
            "failed": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"source": {"type": "string"}, "reason": {"type": "string"}},
                },
            },
            "chunks": {"type": "integer"},
        },
    }

    def ok(schema: dict[str, Any], description: str, status: str = "200") -> dict[str, Any]:
        return {status: {"description": description, "content": {"application/json": {"schema": schema}}}}

    common = (401, 422, 429)
    base = "/v1/knowledge/{kb}"
    return {
        "/v1/knowledge": {
            "get": {
                "operationId": "listKnowledgeBases",
                "summary": "The caller's knowledge bases",
                "description": "The knowledge bases of the authenticated user that hold a document, and the name of "
                "the server's default one (the one its agents search).",
                "responses": {
                    **ok(
                        {
                            "type": "object",
                            "required": ["knowledge_bases", "default"],
                            "properties": {
                                "knowledge_bases": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "required": ["name"],
                                        "properties": {"name": {"type": "string"}},
                                    },
                                },
                                "default": {"type": "string"},
                            },
                        },
                        "The knowledge bases.",
                    ),
                    **error_responses(*common),
                },
            }
        },
        base: {
            "delete": {
                "operationId": "dropKnowledgeBase",
                "summary": "Delete one of the caller's knowledge bases, with every document",
                "parameters": [kb_param],
                "responses": {"204": {"description": "Deleted."}, **error_responses(*common, 404)},
            }
        },
        base + "/documents": {
            "get": {
                "operationId": "listKnowledgeDocuments",
                "summary": "The documents of a knowledge base",
                "parameters": [kb_param],
                "responses": {
                    **ok(
                        {
                            "type": "object",
                            "required": ["kb", "documents"],
                            "properties": {"kb": {"type": "string"}, "documents": {"type": "array", "items": document}},
                        },
                        "The documents, by source.",
                    ),
                    **error_responses(*common),
                },
            },
            "post": {
                "operationId": "addKnowledgeDocument",
                "summary": "Add or replace a document",
                "description": "JSON `{text, source?, metadata?}` (the text itself), or a multipart upload in the "
                "field `file` (.md .markdown .txt .html .htm .pdf .docx; the sanitised filename is the source) with "
                "an optional JSON field `metadata`. An unchanged document is skipped (200); a new or changed one is "
                "indexed (201), replacing its old chunks atomically. 413 over the upload limit (20 MiB by default), "
                "415 for another type, 422 when the document cannot be read.",
                "parameters": [kb_param],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["text"],
                                "properties": {
                                    "text": {"type": "string", "minLength": 1},
                                    "source": {"type": "string", "minLength": 1, "maxLength": MAX_SOURCE_CHARS},
                                    "metadata": {"type": "object"},
                                },
                            }
                        },
                        "multipart/form-data": {
                            "schema": {
                                "type": "object",
                                "required": ["file"],
                                "properties": {
                                    "file": {"type": "string", "format": "binary"},
                                    "metadata": {"type": "string", "description": "A JSON object."},
                                },
                            }
                        },
                    },
                },
                "responses": {
                    **ok(report, "Unchanged: nothing was written."),
                    **ok(report, "Indexed.", "201"),
                    **error_responses(400, *common, 413, 415, 503),
                },
            },
            "delete": {
                "operationId": "deleteKnowledgeDocument",
                "summary": "Delete a document and its chunks",
                "parameters": [
                    kb_param,
                    {
                        "name": "source",
                        "in": "query",
                        "required": True,
                        "description": "The document's source, as listed.",
                        "schema": {"type": "string", "minLength": 1, "maxLength": MAX_SOURCE_CHARS},
                    },
                ],
                "responses": {"204": {"description": "Deleted."}, **error_responses(*common, 404)},
            },
        },
        base + "/search": {
            "get": {
                "operationId": "searchKnowledge",
                "summary": "Search a knowledge base",
                "parameters": [
                    kb_param,
                    {
                        "name": "q",
                        "in": "query",
                        "required": True,
                        "schema": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS},
                    },
                    {"name": "k", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": MAX_K}},
                    {"name": "source", "in": "query", "schema": {"type": "array", "items": {"type": "string"}}},
                    {"name": "tag", "in": "query", "schema": {"type": "array", "items": {"type": "string"}}},
                ],
                "responses": {
                    **ok(
                        {
                            "type": "object",
                            "required": ["kb", "query", "passages"],
                            "properties": {
                                "kb": {"type": "string"},
                                "query": {"type": "string"},
                                "passages": {"type": "array", "items": passage},
                            },
                        },
                        "The passages, best first.",
                    ),
                    **error_responses(*common),
                },
            }
        },
        base + "/chunks/{chunk_id}": {
            "get": {
                "operationId": "getKnowledgePassage",
                "summary": "One passage (what a citation's chunk id names)",
                "parameters": [
                    kb_param,
                    {"name": "chunk_id", "in": "path", "required": True, "schema": {"type": "string"}},
                ],
                "responses": {**ok(passage, "The passage."), **error_responses(*common, 404)},
            }
        },
    }
