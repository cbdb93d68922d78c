public import Crypto
import MockServerSupport

/// How a ``MockAPNSServer`` listens and which provider credentials and device tokens it knows.
///
/// The defaults give a server on an ephemeral loopback port in certificate mode (no JWT checks)
/// where every well-formed push is accepted.
public struct MockAPNSConfiguration: Sendable {
    /// The address to bind. Also added to the server certificate's subject alternative names.
    public var host: String = "127.0.0.1"

    /// The port to bind; `0` picks an ephemeral port (ask ``MockAPNSServer/listeningPort()``).
    public var port: Int = 0

    /// Where to write the PEM of the generated self-signed CA, so clients can trust it.
    /// Parent directories are created. `nil` writes nothing.
    public var caCertificatePath: String?

    /// ES256 public keys by key id (`kid`) used to verify provider tokens (JWT).
    /// Empty means certificate mode: the `authorization` header is not checked at all.
    public var providerKeys: [String: P256.Signing.PublicKey]

    /// When set, a provider token's `iss` claim must equal this team id.
    public var teamID: String?

    /// Device tokens (lowercase hex) that answer 410 Unregistered, with the timestamp to report
    /// (milliseconds since 1970).
    public var unregisteredTokens: [String: Int64]

    /// The SETTINGS_MAX_CONCURRENT_STREAMS value the server advertises on every connection.
    public var maxConcurrentStreams: Int = 1000

    /// How many requests ``MockAPNSServer/receivedRequests()`` keeps (the most recent ones).
    /// `0` records none, which keeps long benchmark runs lean; counters are kept regardless.
    public var requestLogLimit: Int = 100_000

    /// Injected faults (error fractions, latency, GOAWAY, the one-stream rule); none by default.
    public var faults: MockAPNSFaults = .none

    /// A PEM file of CA certificates. When set, the server requires a TLS client certificate
    /// issued by one of them (as APNs does for certificate authentication) and refuses the
    /// handshake otherwise. `nil` asks for no client certificate.
    public var clientCertificateAuthorityPath: String?

    /// Answers carry `apns-unique-id`, as Apple's development (sandbox) environment does.
    public var returnsUniqueIDs = false

    /// Broadcast channels one app may have; creating one more is refused with
    /// `CannotCreateChannelConfig` (Apple's limit is 10,000).
    public var maximumChannelsPerApp = 10_000

    /// The server's wall clock in milliseconds since 1970, by which a provider token's age is
    /// judged; a test moves it to let a token expire without waiting an hour.
    public var wallClockMilliseconds: @Sendable () -> Int64 = MockWallClock.millisecondsSince1970

    /// Creates a configuration; every parameter has the default documented on its property.
    public init(
        host: String = "127.0.0.1",
        port: Int = 0,
        caCertificatePath: String? = nil,
        providerKeys: [String: P256.Signing.PublicKey] = [:],
        teamID: String? = nil,
        unregisteredTokens: [String: Int64] = [:],
        maxConcurrentStreams: Int = 1000,
        requestLogLimit: Int = 100_000,
        faults: MockAPNSFaults = .none,
        clientCertificateAuthorityPath: String? = nil
    ) {
        self.host = host
        self.port = port
        self.caCertificatePath = caCertificatePath
        self.providerKeys = providerKeys
        self.teamID = teamID
        self.unregisteredTokens = unregisteredTokens
        self.maxConcurrentStreams = maxConcurrentStreams
        self.requestLogLimit = requestLogLimit
        self.faults = faults
        self.clientCertificateAuthorityPath = clientCertificateAuthorityPath
    }
}
