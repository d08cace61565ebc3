# The types of `pith_pipeline`'s public names (the module imports them lazily: __init__.py).
from pith_pipeline.config import Settings as Settings
from pith_pipeline.core.verify import verify_bundle as verify_bundle
from pith_pipeline.errors import IncompleteRunError as IncompleteRunError
from pith_pipeline.errors import InputError as InputError
from pith_pipeline.errors import IntegrityError as IntegrityError
from pith_pipeline.errors import PithError as PithError
from pith_pipeline.errors import SigningError as SigningError
from pith_pipeline.errors import StorageError as StorageError
from pith_pipeline.errors import TerminalError as TerminalError
from pith_pipeline.errors import TransientError as TransientError
from pith_pipeline.errors import VerificationError as VerificationError
from pith_pipeline.errors import WriteConflictError as WriteConflictError
from pith_pipeline.runs.run import Run as Run
from pith_pipeline.signing.factory import open_signer as open_signer
from pith_pipeline.sources.jsonl import iter_jsonl as iter_jsonl
from pith_pipeline.storage.factory import open_store as open_store

__version__: str
__all__: list[str]
from pith_pipeline.core.arxiv_pointer import ArxivPointer as ArxivPointer
from pith_pipeline.core.documents import Bundle as Bundle
from pith_pipeline.core.documents import Event as Event
from pith_pipeline.core.documents import KeyDocument as KeyDocument
from pith_pipeline.core.documents import State as State
