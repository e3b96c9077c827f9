"""sparsewatch: streaming novelty, topic and anomaly detection over Kafka."""

__version__ = "0.1.0"
