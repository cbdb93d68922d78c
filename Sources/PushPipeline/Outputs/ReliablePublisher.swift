import APNSCore
import PushCore
import KafkaMessages
import Logging

/// Publishes results, unregistered events and dead letters until the broker acknowledges them.
///
/// Each attempt hands the record over once and waits for its delivery report, however long
/// librdkafka retries it (`message.timeout.ms` bounds that): a slow broker is never answered by
/// enqueueing the same record again. A failed attempt is tried again with backoff:
/// - a retriable error (time-out, transport, leader change) clears up by itself;
/// - a permanent one (record too large, unknown topic, denied ACL) needs an operator: while any
///   publish is held by one, ``blockingCauses`` names it (Herald is unready), it is logged once
///   per cause and counted, and the publish is retried slowly, so creating the topic or
///   granting the ACL resumes the partition without a restart.
///
/// A dead letter too large for the broker is sent again without its value, with the header
/// `herald-value-omitted: too_large`.
final class ReliablePublisher: Sendable {
    private let publisher: any MessagePublisher
    private let logger: Logger
    private let metrics: PipelineMetrics
    private let retry: PersistentRetry

    /// `retriableBackoff` paces attempts after retriable errors, `permanentBackoff` after permanent ones.
    init(
        publisher: any MessagePublisher,
        retriableBackoff: Backoff,
        permanentBackoff: Backoff,
        logger: Logger,
        metrics: PipelineMetrics
    ) {
        self.publisher = publisher
        self.logger = logger
        self.metrics = metrics
        let reports = PersistentRetry.Reports(
            held: { cause, error, first, metadata in
                metrics.recordPermanentPublishError(cause)
                guard first else { return }
                logger.error(
                    "publishing is blocked by a permanent broker error; Herald is unready until it clears",
                    metadata: metadata.merging([PipelineLoggingKeys.kafkaError: "\(cause)", PipelineLoggingKeys.error: "\(error)"]) { $1 }
                )
            },
            released: { cause in logger.info("publishing is no longer blocked", metadata: [PipelineLoggingKeys.kafkaError: "\(cause)"]) },
            transient: { error, attempt, metadata in
                guard attempt == 1 || attempt.isMultiple(of: 20) else { return }
                logger.warning(
                    "retrying publish",
                    metadata: metadata.merging([PipelineLoggingKeys.error: "\(error)", PipelineLoggingKeys.attempt: "\(attempt)"]) { $1 }
                )
            }
        )
        retry = PersistentRetry(transientBackoff: retriableBackoff, permanentBackoff: permanentBackoff, reports: reports)
    }

    /// The permanent errors that hold publishes right now (empty when publishing works).
    var blockingCauses: [String] {
        retry.blockingCauses
    }

    /// Publishes a dead letter; one too large for the broker goes without its value.
    func publishDeadLetter(_ message: KafkaOutgoingMessage) async throws(CancellationError) {
        try await publish(message, omittingValueIfTooLarge: true)
    }

    /// Publishes `messages` together; returns once the broker acknowledged every one. Those it
    /// refused are retried one by one with backoff. Throws only when cancelled.
    func publish(_ messages: [KafkaOutgoingMessage]) async throws(CancellationError) {
        let failures = zip(messages, await publisher.send(messages)).compactMap { message, error in
            error.map { (message, $0) }
        }
        guard !failures.isEmpty else { return }
        let allPublished = await withTaskGroup(of: Bool.self) { group in
            for (message, error) in failures {
                group.addTask {
                    (try? await self.publish(message, omittingValueIfTooLarge: false, after: error)) != nil
                }
            }
            return await group.allSatisfy { $0 }
        }
        if !allPublished { throw CancellationError() }
    }

    /// Sends `message` until the broker acknowledges it; `firstFailure` is the error of an
    /// attempt already made.
    private func publish(
        _ message: KafkaOutgoingMessage,
        omittingValueIfTooLarge: Bool,
        after firstFailure: (any Error)? = nil
    ) async throws(CancellationError) {
        var message = message
        var failureToHandle = firstFailure
        try await retry.run(metadata: [PipelineLoggingKeys.topic: "\(message.topic)"]) { () async -> PersistentRetry.Attempt<Void> in
            let failure: any Error
            if let failureToHandle {
                failure = failureToHandle
            } else {
                do {
                    try await publisher.send(message)
                    return .succeeded(())
                } catch {
                    failure = error
                }
            }
            failureToHandle = nil
            let kafkaError = failure as? any PublishError
            metrics.recordPublishError(kafkaError?.cause ?? "unknown")
            if omittingValueIfTooLarge, kafkaError?.isRecordTooLarge == true, message.value != nil {
                logger.warning(
                    "dead letter too large for the broker; sending it without its value",
                    metadata: [PipelineLoggingKeys.topic: "\(message.topic)", PipelineLoggingKeys.error: "\(failure)"]
                )
                message.value = nil
                message.headers.append(KafkaHeader(key: "herald-value-omitted", text: "too_large"))
                return .again
            }
            if let kafkaError, !kafkaError.isRetriable {
                return .permanent(cause: kafkaError.cause ?? "unknown", kafkaError)
            }
            return .transient(failure)
        }
    }
}
