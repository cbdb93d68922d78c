public import APNSCore

/// Carries out channel management commands against Apple's channel management API, with the
/// delivery retry rules: 2xx is `ok`, 429 and 5xx and lost connections are retried with backoff
/// until the attempts or the deadline run out (`failed`), any other answer is `rejected` with
/// Apple's reason. Used by push.channels (``NotificationPipeline``) and `herald channel`.
public struct ChannelManager: Sendable {
    private let client: any APNSClientProtocol
    private let policy: RetryPolicy

    /// `client` reaches the channel management hosts; `policy` bounds attempts and time.
    public init(client: any APNSClientProtocol, policy: RetryPolicy) {
        self.client = client
        self.policy = policy
    }

    /// Performs `command`; throws only when cancelled.
    public func perform(_ command: ChannelCommand) async throws(CancellationError) -> ChannelCommandResult {
        let clock = ContinuousClock()
        let deadline = clock.now + policy.deliveryDeadline
        let request = APNSRequest(
            channelOperation: command.operation,
            bundleID: command.topic,
            requestID: NotificationID.derive(eventID: command.requestID, token: "channel-management")
        )
        var attempts = RetryAttempts()
        var lastStatus: Int?
        var lastReason: String?
        func result(_ status: ChannelCommandResult.Status) -> ChannelCommandResult {
            ChannelCommandResult(
                command: command,
                status: status,
                apnsStatus: lastStatus,
                reason: lastReason,
                completedAtMilliseconds: WallClock.millisecondsSince1970()
            )
        }
        while true {
            do {
                let response = try await client.send(
                    request,
                    environment: command.environment,
                    deadline: min(clock.now + policy.requestTimeout, deadline)
                )
                lastStatus = response.status
                lastReason = response.reason?.rawValue
                switch response.status {
                case 200..<300: return Self.succeeded(command, response)
                case 429, 500...599: break
                default: return result(.rejected)
                }
            } catch is APNSNoCredentialError {
                lastReason = "NoCredentialForTopic"
                return result(.rejected)
            } catch is APNSTokenAuthenticationRequiredError {
                lastReason = "TokenAuthenticationRequired"
                return result(.rejected)
            } catch let error as APNSTransportError {
                lastStatus = nil
                lastReason = error.resultReason
            } catch {
                throw CancellationError()
            }
            let wait = attempts.delayAfterFailure(policy.backoff)
            guard attempts.failures < policy.maxAttempts, clock.now + wait < deadline else { return result(.failed) }
            try await RetryAttempts.wait(wait)
        }
    }

    /// The `ok` result, with what the answer says: the new channel's ID (create), its settings
    /// (read) or the app's channels (list).
    private static func succeeded(_ command: ChannelCommand, _ response: APNSResponse) -> ChannelCommandResult {
        var result = ChannelCommandResult(
            command: command,
            status: .ok,
            apnsStatus: response.status,
            channelID: response.channelID ?? command.channelID,
            completedAtMilliseconds: WallClock.millisecondsSince1970()
        )
        let body = response.body.flatMap { try? JSONObjectDecoder.decode($0) }
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
