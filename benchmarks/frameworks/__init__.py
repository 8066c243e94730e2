"""Framework benchmarks: the Haystack, LlamaIndex and Milvus adapters against the frameworks' own stores."""
