"""The Flask app: one webhook route and `/healthz`. The app only composes; each concern has its own module."""

from __future__ import annotations

from flask import Flask
from flask import jsonify
from flask import request

from bot import webhook
from bot.intake import DeliveryIntake


def create_app(runtime) -> Flask:
    app = Flask("liger-bot")
    app.config["MAX_CONTENT_LENGTH"] = runtime.config.max_payload_bytes
    intake = DeliveryIntake(runtime.store, runtime.queue)  # deliveries arriving together share one commit
    runtime.store.checkpoint_in_background()  # and no ack waits on a WAL checkpoint

    @app.post(runtime.config.webhook_path)
    def receive_webhook():
        return webhook.receive(request, runtime, intake)

    @app.get("/healthz")
    def healthz():
        return jsonify(ok=True, database=runtime.store.engine.dialect.name, queue=runtime.queue.backend)

    @app.errorhandler(413)
    def too_large(_error):
        limit = runtime.config.max_payload_bytes // (1024 * 1024)
        response = jsonify(error=f"payload larger than {limit} MiB")
        response.status_code = 413
        response.headers["Connection"] = "close"
        return response

    return app
