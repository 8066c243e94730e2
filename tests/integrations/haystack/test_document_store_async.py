"""RagHierDocumentStore against every shared *async* document-store test class of Haystack."""

from __future__ import annotations

import inspect

import pytest
from haystack import Document
from haystack.document_stores.errors import DuplicateDocumentError
from haystack.testing import document_store_async as haystack_async_tests
from haystack.testing.document_store_async import (
    CountDocumentsAsyncTest,
    CountDocumentsByFilterAsyncTest,
    CountUniqueMetadataByFilterAsyncTest,
    DeleteAllAsyncTest,
    DeleteByFilterAsyncTest,
    DeleteDocumentsAsyncTest,
    FilterDocumentsAsyncTest,
    GetMetadataFieldMinMaxAsyncTest,
    GetMetadataFieldsInfoAsyncTest,
    GetMetadataFieldUniqueValuesAsyncTest,
    UpdateByFilterAsyncTest,
    WriteDocumentsAsyncTest,
)
from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

ASYNC_MIXINS = (
    CountDocumentsAsyncTest,
    WriteDocumentsAsyncTest,
    DeleteDocumentsAsyncTest,
    FilterDocumentsAsyncTest,
    DeleteAllAsyncTest,
    DeleteByFilterAsyncTest,
    UpdateByFilterAsyncTest,
    CountDocumentsByFilterAsyncTest,
    CountUniqueMetadataByFilterAsyncTest,
    GetMetadataFieldsInfoAsyncTest,
    GetMetadataFieldMinMaxAsyncTest,
    GetMetadataFieldUniqueValuesAsyncTest,
)


def test_every_shared_async_test_class_is_used():
    defined = {
        obj
        for _, obj in inspect.getmembers(haystack_async_tests, inspect.isclass)
        if obj.__module__ == haystack_async_tests.__name__ and any(n.startswith("test_") for n in vars(obj))
    }
    assert defined == set(ASYNC_MIXINS)


class TestRagHierDocumentStoreAsyncConformance(*ASYNC_MIXINS):
    """Haystack's shared async document-store tests, all of them, on a directory and on Milvus Lite."""

    @pytest.fixture
    def document_store(self, store_location):
        store = RagHierDocumentStore(**store_location)
        yield store
        store.close()

    @pytest.mark.asyncio
    async def test_write_documents_async(self, document_store):
        doc = Document(content="test doc")
        assert await document_store.write_documents_async([doc]) == 1
        with pytest.raises(DuplicateDocumentError):
            await document_store.write_documents_async([doc])
        self.assert_documents_are_equal(await document_store.filter_documents_async(), [doc])


@pytest.mark.asyncio
async def test_async_retrieval_matches_sync(store_path):
    store = RagHierDocumentStore(path=store_path)
    docs = [Document(content=f"d{i}", meta={"i": i}, embedding=[float(i), 1.0, 0.5]) for i in range(20)]
    await store.write_documents_async(docs)
    filters = {"field": "meta.i", "operator": "<", "value": 10}
    sync = store.embedding_retrieval([1.0, 0.0, 0.0], filters=filters, top_k=3)
    assert await store.embedding_retrieval_async([1.0, 0.0, 0.0], filters=filters, top_k=3) == sync
    assert [d.meta["i"] for d in sync] == [9, 8, 7]
    await store.close_async()
