"""The input side: which rows a run covers, under which ids, and each row's page as the model is sent it."""
