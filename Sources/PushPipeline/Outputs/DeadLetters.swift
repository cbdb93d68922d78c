import KafkaMessages
import PushCore
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

    /// Handles one input message the way every topic's handler does: decodes its value with
    /// `decode`, dead-letters it when it cannot be read, otherwise gives it to `apply`. Returns
    /// true once it is done (applied or dead-lettered), false when cancelled first (it is then
    /// left unfinished and redelivered).
    func handle<Input>(
        _ message: KafkaMessage,
        decode: ([UInt8]?) throws(InputRejection) -> Input,
        apply: (Input) async throws -> Void
    ) async -> Bool {
        let input: Input
        do {
            input = try decode(message.value)
        } catch {
            return (try? await send(message, error)) != nil
        }
        do {
            try await apply(input)
            return true
        } catch {
            return false
        }
    }
}
