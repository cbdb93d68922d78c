public import KafkaMessages

/// Where the pipeline reads messages and acknowledges them: a consumer-group member.
public protocol MessageSource: Sendable {
    /// Returns up to `maxMessages`, waiting at most `timeout` for the first one.
    func poll(maxMessages: Int, timeout: Duration) async throws -> [KafkaMessage]
    /// Commits, per partition, the offset of the next message to read, for the partitions still
    /// assigned to this member when the commit runs (a lost or revoked partition's offsets are
    /// dropped: a revocation returns its own, and a lost one's new owner commits its own).
    func commit(_ offsets: [KafkaTopicPartition: Int64]) async throws
    /// Registers who is told before partitions are revoked.
    func setRebalanceListener(_ listener: any KafkaRebalanceListener)
    /// Stops fetching while the pipeline's in-flight window is full.
    func pauseAll() async throws
    /// Fetches again once the window has room.
    func resumeAll() async throws
    /// Leaves the consumer group now, at a graceful stop once this lane's work is committed:
    /// its partitions go to other members without waiting for the rest of the process.
    func leaveGroup() async
}

/// Where the pipeline publishes results, unregistered-token events and dead letters.
public protocol MessagePublisher: Sendable {
    /// Returns once the broker has acknowledged the record.
    func send(_ message: KafkaOutgoingMessage) async throws
    /// Sends every message once; returns once each was acknowledged or refused, in order: nil
    /// for an acknowledged one, the error of a refused one.
    func send(_ messages: [KafkaOutgoingMessage]) async -> [(any Error)?]
}

extension MessagePublisher {
    /// Sends the messages concurrently, one `send(_:)` each.
    public func send(_ messages: [KafkaOutgoingMessage]) async -> [(any Error)?] {
        await withTaskGroup(of: (Int, (any Error)?).self) { group in
            for (index, message) in messages.enumerated() {
                group.addTask {
                    do {
                        try await send(message)
                        return (index, nil)
                    } catch {
                        return (index, error)
                    }
                }
            }
            var errors = [(any Error)?](repeating: nil, count: messages.count)
            for await (index, error) in group { errors[index] = error }
            return errors
        }
    }
}
