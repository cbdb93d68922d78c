/// How a ``MockWebPushServer`` listens and what it accepts.
///
/// The defaults give two origins on ephemeral loopback ports, each its own push service with its
/// own connections, as a sender talking to several browsers' push services sees them.
public struct MockWebPushConfiguration: Sendable {
    /// The address to bind; also in the server certificate's subject alternative names and in
    /// every origin (`https://<host>:<port>`).
    public var host: String = "127.0.0.1"
    /// One port per origin, in order; `0` picks an ephemeral one (ask
    /// ``MockWebPushServer/listeningPorts()``).
    public var ports: [Int] = [0, 0]
    /// Where to write the PEM of the generated CA, so clients can trust it; nil writes nothing.
    public var caCertificatePath: String?
    /// Seed of the subscriptions' ids, keys and secrets and of the message ids, for reproducible
    /// runs; nil seeds randomly.
    public var seed: UInt64?
    /// The largest request body accepted; a larger one is answered 413. RFC 8030 §7.2 asks push
    /// services for at least 4,096 bytes, and that is what the browsers' services take.
    public var maximumBodyBytes: Int = 4096
    /// How many deliveries ``MockWebPushServer/deliveries(endpoint:)`` keeps (the most recent,
    /// over all endpoints); 0 keeps none. Counts are kept whatever the limit.
    public var requestLogLimit: Int = 10_000
    /// Time before each complete request is answered, for benchmarks; 0 adds none.
    public var answerDelayMilliseconds: Int = 0
    /// Whether each message is decrypted and its VAPID signature verified (an ECDH and an ECDSA
    /// verification per request). False only for a benchmark on a machine Herald shares with
    /// the mock: a real push service does that work on its own machines. The headers, the
    /// subscription and the size are checked either way; deliveries then keep no plaintext.
    public var checksCryptography = true

    /// Creates a configuration; every setting defaults to the value documented on its property.
    public init(
        host: String = "127.0.0.1",
        ports: [Int] = [0, 0],
        caCertificatePath: String? = nil,
        seed: UInt64? = nil,
        maximumBodyBytes: Int = 4096,
        requestLogLimit: Int = 10_000,
        answerDelayMilliseconds: Int = 0
    ) {
        self.host = host
        self.ports = ports
        self.caCertificatePath = caCertificatePath
        self.seed = seed
        self.maximumBodyBytes = max(0, maximumBodyBytes)
        self.requestLogLimit = max(0, requestLogLimit)
        self.answerDelayMilliseconds = max(0, answerDelayMilliseconds)
    }
}
