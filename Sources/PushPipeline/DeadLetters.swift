import KafkaMessages
import Logging

/// Sends a message Herald cannot read to push.dlq: the original record, its headers, and the
/// contract's reason headers (`herald-error`, `herald-error-detail`, the source's topic,
/// partition and offset).
struct DeadLetters: Sendable {
    let topic: String
    let publisher: ReliablePublisher
    let metrics: PipelineMetrics
    let logger: Logger

    /// Returns once the dead letter was published; throws only when cancelled.
    func send(_ message: KafkaMessage, _ rejection: InputRejection) async throws(CancellationError) {
        logger.warning(
            "dead-lettering message",
            metadata: [
                PipelineLoggingKeys.topic: "\(message.topic)",
                PipelineLoggingKeys.partition: "\(message.partition)",
                PipelineLoggingKeys.offset: "\(message.offset)",
                PipelineLoggingKeys.rejection: "\(rejection.code.rawValue)",
                PipelineLoggingKeys.rejectionDetail: "\(rejection.detail)",
            ]
        )
        let headers =
            message.headers + [
                KafkaHeader(key: "herald-error", text: rejection.code.rawValue),
                KafkaHeader(key: "herald-error-detail", text: rejection.detail),
                KafkaHeader(key: "herald-source-topic", text: message.topic),
                KafkaHeader(key: "herald-source-partition", text: String(message.partition)),
                KafkaHeader(key: "herald-source-offset", text: String(message.offset)),
            ]
        try await publisher.publishDeadLetter(KafkaOutgoingMessage(topic: topic, key: message.key, value: message.value, headers: headers))
        metrics.recordDeadLetter(rejection.code)
    }
}
