import PushCore

/// Sends messages to browsers' push services. The pipeline depends on this protocol only.
public protocol WebPushClientProtocol: Sendable {
    /// Encrypts `request`'s plaintext for its subscription, signs the VAPID token with the key
    /// that serves `request.app`, POSTs it to the endpoint and returns the service's answer.
    ///
    /// Throws ``TransportError`` when no answer arrived, ``WebPushNoCredentialError`` when no
    /// VAPID key serves the app (or the subscription's key is no longer listed), and
    /// ``WebPushHostRefusedError`` when the endpoint's host is outside the allow-list; the last
    /// two before any connection is opened.
    func send(_ request: WebPushRequest, deadline: ContinuousClock.Instant) async throws -> WebPushResponse

    /// Sends every request at once and calls `answered` with each one's index in `requests` and
    /// what ``send(_:deadline:)`` would have returned or thrown, as each answer arrives; returns
    /// once every request was answered.
    func sendAll(
        _ requests: [WebPushRequest],
        deadline: ContinuousClock.Instant,
        answered: @escaping @Sendable (Int, Result<WebPushResponse, any Error>) -> Void
    ) async
}

extension WebPushClientProtocol {
    public func sendAll(
        _ requests: [WebPushRequest],
        deadline: ContinuousClock.Instant,
        answered: @escaping @Sendable (Int, Result<WebPushResponse, any Error>) -> Void
    ) async {
        await sendEachInATask(requests.count, answered: answered) { index in
            try await send(requests[index], deadline: deadline)
        }
    }
}

/// A message for a web app no VAPID key serves, or to a subscription made with a key no longer
/// listed. Nothing was sent; the result is `rejected` with reason ``resultReason``.
public struct WebPushNoCredentialError: Error, Sendable, Hashable, CustomStringConvertible {
    public let app: String

    public init(app: String) {
        self.app = app
    }

    /// The result's `reason`: `NoCredentialForApp`.
    public static let resultReason = "NoCredentialForApp"

    public var description: String { "no VAPID key serves the web app \(app) (or the subscription's key)" }
}

/// An endpoint whose host HERALD_WEBPUSH_ALLOWED_HOSTS does not allow. Nothing was sent and no
/// connection opened; the result is `rejected` with reason `invalid_token`.
public struct WebPushHostRefusedError: Error, Sendable, Hashable, CustomStringConvertible {
    public let host: String

    public init(host: String) {
        self.host = host
    }

    public var description: String { "the push service host \(host) is not in HERALD_WEBPUSH_ALLOWED_HOSTS" }
}
