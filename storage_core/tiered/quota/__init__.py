"""KIP-956 quotas on the remote tier: Kafka's ``RLMQuotaManager`` (a windowed byte rate with a
bound), ``RLMQuotaMetrics`` (the throttle-time sensors) and the copy pacing built on them."""
