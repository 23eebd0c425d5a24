"""llama.cpp, driven through llama-cpp-python's C API: load, prefill, decode, measure. No Textual."""
