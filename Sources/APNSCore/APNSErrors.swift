/// A request for a topic the client has no credential for. Nothing was sent, and retrying
/// cannot help until a credential for the topic is configured.
public struct APNSNoCredentialError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The request's `apns-topic`.
    public let topic: String

    public init(topic: String) {
        self.topic = topic
    }

    public var description: String { "no APNs credential serves the topic \(topic)" }
}

/// A broadcast or channel management request for an app whose credential is a certificate:
/// Apple serves channels to token (JWT) authentication only. Nothing was sent.
public struct APNSTokenAuthenticationRequiredError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The request's bundle ID.
    public let topic: String

    public init(topic: String) {
        self.topic = topic
    }

    public var description: String { "channel requests for \(topic) need token authentication; its credential is a certificate" }
}
