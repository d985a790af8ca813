"""One module per model: the facts its recipes are generated from (id, image tag, serve flags, prompt, hooks).

Offline and server twins inline the same module, so they cannot disagree about the model.
"""
