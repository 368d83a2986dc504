"""llama.cpp as the CPU speed peer, through llama-cpp-python's low-level API (the benchmarks drive
its batch API directly, so that both engines run the same shapes): loading a model, a context,
and clearing its memory, across the API's renames."""


def open_context(model_path, threads, n_ctx, n_batch, n_seq_max, embeddings=False, pooling_type=None):
    """(llama_cpp module, model, context); raises ImportError without llama-cpp-python."""
    import llama_cpp as L
    L.llama_backend_init()
    load = getattr(L, "llama_model_load_from_file", None) or L.llama_load_model_from_file
    model = load(model_path.encode(), L.llama_model_default_params())
    cp = L.llama_context_default_params()
    cp.n_ctx = n_ctx
    cp.n_batch = cp.n_ubatch = n_batch
    cp.n_seq_max = n_seq_max
    cp.n_threads = cp.n_threads_batch = threads
    if embeddings:
        cp.embeddings = True
        cp.pooling_type = pooling_type
    new_ctx = getattr(L, "llama_init_from_model", None) or L.llama_new_context_with_model
    return L, model, new_ctx(model, cp)


def clear_memory(L, ctx):
    if hasattr(L, "llama_get_memory"):
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
    else:
        L.llama_kv_cache_clear(ctx)
