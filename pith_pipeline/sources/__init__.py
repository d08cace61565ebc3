"""Where arXiv records come from: JSON lines (snapshot layout), OAI-PMH, the API."""
