"""kopf glue of the validating admission webhook (``shardcdc operator --webhook-port``).

Imported only when the webhook is on: kopf refuses to start when admission handlers are registered
and no admission server is configured. The Helm chart owns the ValidatingWebhookConfiguration and
the serving certificate (a Secret mounted at ``--webhook-cert-dir``), so kopf only serves: it never
creates or patches webhook configurations (that would need cluster-wide RBAC on them).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kopf

from cdcoperator.admission import denial_message, review
from cdcoperator.apply import PLURAL
from cdcoperator.model import GROUP, VERSION

__all__ = ["WEBHOOK_ID", "WebhookConfig", "enable"]

# The URL path the API server calls (kopf routes POST /<handler id> to that handler): the chart's
# ValidatingWebhookConfiguration names it.
WEBHOOK_ID = "validate-cdcconnector"


@dataclass(frozen=True, slots=True)
class WebhookConfig:
    port: int
    cert_dir: Path  # tls.crt and tls.key (a kubernetes.io/tls Secret's keys)
    address: str = "0.0.0.0"


_config: WebhookConfig | None = None


class _RefusalsAreNotErrors(logging.Filter):
    """kopf logs every refused request as ERROR ("Webhook ... failed permanently: <message>"): a user's
    invalid manifest is no fault of the operator's, so log it at INFO (the message stays)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.ERROR and str(record.msg).startswith(f"Webhook {WEBHOOK_ID!r} failed permanently"):
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def enable(config: WebhookConfig) -> None:
    """Serve the webhook with ``config`` once the operator starts (call before ``kopf.operator``)."""
    global _config
    for name in ("tls.crt", "tls.key"):
        if not (config.cert_dir / name).is_file():
            raise SystemExit(f"shardcdc operator: --webhook-cert-dir {config.cert_dir} has no {name} (mount the "
                             "webhook's kubernetes.io/tls Secret there, or run without --webhook-port)")
    _config = config
    logging.getLogger("kopf.objects").addFilter(_RefusalsAreNotErrors())


@kopf.on.startup()
async def serve(settings: kopf.OperatorSettings, **_: object) -> None:
    assert _config is not None, "cdcoperator.webhook imported without enable()"
    settings.admission.server = kopf.WebhookServer(
        addr=_config.address, port=_config.port,
        certfile=str(_config.cert_dir / "tls.crt"), pkeyfile=str(_config.cert_dir / "tls.key"))
    settings.admission.managed = None  # the chart's ValidatingWebhookConfiguration, not kopf's


@kopf.on.validate(GROUP, VERSION, PLURAL, id=WEBHOOK_ID, operations=["CREATE", "UPDATE"])
def validate(body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:  # Any: kopf's keyword arguments, passed on as kopf gives them
    problems = review(body, kwargs.get("old"), memo.get("policy"))
    if problems:  # kopf logs the message (at INFO: _RefusalsAreNotErrors)
        raise kopf.AdmissionError(denial_message(problems), code=422)
