import JSONCore
import PushCore
import PushStores
public import APNSCore

/// Carries out channel management commands against Apple's channel management API through a
/// ``RetryingSender``, so a command gets the notifications' retry rules: 2xx is `ok`, 429,
/// 5xx and lost connections are retried with backoff until the attempts or the deadline run out
/// (`failed`), any other answer is `rejected` with Apple's reason. Used by push.channels
/// (``NotificationPipeline``) and `herald channel`.
public struct ChannelManager: Sendable {
    private let sender: RetryingSender

    /// `client` reaches the channel management hosts; `policy` bounds attempts and time; the
    /// attempts are counted in `metrics`.
    public init(client: any APNSClientProtocol, policy: RetryPolicy, metrics: SenderMetrics = SenderMetrics()) {
        sender = RetryingSender(client: client, policy: policy, metrics: metrics)
    }

    /// Performs `command`; throws only when cancelled.
    public func perform(_ command: ChannelCommand) async throws(CancellationError) -> ChannelCommandResult {
        let request = APNSRequest(
            channelOperation: command.operation,
            bundleID: command.topic,
            requestID: NotificationID.derive(eventID: command.requestID, token: ChannelCommand.ledgerToken)
        )
        let outcome: DeliveryOutcome
        do {
            outcome = try await sender.deliver(request, environment: command.environment, consumedAt: PipelineClock.now)
        } catch {
            throw CancellationError()  // Unfenced: cancellation is the only way it stops.
        }
        if outcome.status == .delivered { return Self.succeeded(command, outcome) }
        return ChannelCommandResult(
            command: command,
            status: outcome.status == .failed || outcome.status == .expired ? .failed : .rejected,
            apnsStatus: outcome.apnsStatus,
            reason: outcome.reason,
            completedAtMilliseconds: PipelineClock.wallMilliseconds
        )
    }

    /// The `ok` result, with what the answer says: the new channel's ID (create), its settings
    /// (read) or the app's channels (list).
    private static func succeeded(_ command: ChannelCommand, _ outcome: DeliveryOutcome) -> ChannelCommandResult {
        var result = ChannelCommandResult(
            command: command,
            status: .ok,
            apnsStatus: outcome.apnsStatus,
            channelID: outcome.channelID ?? command.channelID,
            completedAtMilliseconds: PipelineClock.wallMilliseconds
        )
        let body = outcome.body.flatMap { try? JSONObjectDecoder.decode($0) }
        switch command.action {
        case .create:
            result.messageStoragePolicy = command.messageStoragePolicy
        case .read:
            if case .number(let policy)? = body?["message-storage-policy"] { result.messageStoragePolicy = Int(policy) }
        case .list:
            result.channelID = nil
            if case .array(let channels)? = body?["channels"] {
                result.channelIDs = channels.compactMap { if case .string(let id) = $0 { id } else { nil } }
            } else {
                result.channelIDs = []
            }
        case .delete:
            break
        }
        return result
    }
}
