public import Logging
import MockServerSupport
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP2
import NIOSSL
public import ServiceLifecycle

/// An HTTP/2 + TLS server that answers like Apple's APNs provider API.
///
/// `run()` generates a throw-away CA and server certificate, binds, and serves until the task is
/// cancelled or a graceful shutdown is triggered; then it closes every connection. The counters
/// and the request log can be read at any time from any thread.
public final class MockAPNSServer: Service, Sendable {
    /// One request the server answered, as ``receivedRequests()`` reports it.
    public struct ReceivedRequest: Sendable {
        /// The device token from `:path`, as sent.
        public var token: String
        /// Every request header in arrival order, pseudo-headers (`:method`, `:path`…) included.
        public var headers: [(name: String, value: String)]
        /// The request body (only its first ``MockAPNSServer/maximumKeptPayloadBytes`` bytes).
        public var payload: [UInt8]
        /// The HTTP status the server answered.
        public var status: Int
        /// The `reason` of an error answer; `nil` for 200.
        public var reason: String?
        /// The `apns-id` the server answered with: the request's when it was a valid UUID,
        /// otherwise a fresh lowercase one.
        public var apnsID: String

        /// The first value of the header `name` (lowercase), if present.
        public func header(_ name: String) -> String? {
            self.headers.first { $0.name == name }?.value
        }
    }

    /// The most body bytes a request keeps for the log (the voip payload limit).
    public static let maximumKeptPayloadBytes = 5120

    let configuration: MockAPNSConfiguration
    let logger: Logger
    let providerTokenVerifier: ProviderTokenVerifier
    let ledger: NIOLockedValueBox<Ledger>
    private let listener = MockListener(alreadyStarted: MockAPNSServerError.alreadyStarted, stopped: MockAPNSServerError.stopped)

    /// Creates a server; nothing happens until ``run()``.
    public init(configuration: MockAPNSConfiguration, logger: Logger) {
        self.configuration = configuration
        self.logger = logger
        self.providerTokenVerifier = ProviderTokenVerifier(
            publicKeys: configuration.providerKeys,
            teamID: configuration.teamID
        )
        var ledger = Ledger(
            requestLogLimit: max(0, configuration.requestLogLimit),
            seed: configuration.faults.seed ?? UInt64.random(in: .min ... .max),
            faults: configuration.faults
        )
        for (token, millis) in configuration.unregisteredTokens {
            ledger.unregisteredTokens[Encoding.asciiLowercased(token[...])] = millis
        }
        self.ledger = NIOLockedValueBox(ledger)
    }

    // MARK: Running

    /// Binds, serves until cancelled or gracefully shut down, then closes every connection.
    public func run() async throws {
        let channels: [any Channel]
        do {
            channels = try await listener.bind(
                host: configuration.host,
                ports: [configuration.port],
                authorityName: "Herald Mock APNs CA",
                caCertificatePath: configuration.caCertificatePath,
                adjustTLS: requireClientCertificates,
                configureConnection: { channel, sslContext in try self.configureConnection(channel, sslContext: sslContext) }
            )
        } catch {
            logger.error("mock APNs failed to start", metadata: ["error": "\(error)"])
            throw error
        }
        logger.info(
            "mock APNs listening",
            metadata: ["mock_apns.host": "\(configuration.host)", "mock_apns.port": "\(listener.boundPorts?.first ?? configuration.port)"]
        )
        await listener.serveUntilStopped(channels)
        logger.info("mock APNs stopped", metadata: ["mock_apns.accepted": "\(totalAcceptedPushes)"])
    }

    /// The bound port; waits until ``run()`` has bound it. Throws when `run()` failed or stopped.
    public func listeningPort() async throws -> Int {
        try await listener.listeningPorts()[0]
    }

    /// With a client CA configured: a client certificate must chain to one of its CAs (no host
    /// name check: a client certificate names a provider, not a host). With provider keys too, as
    /// APNs serves both kinds of provider on one host, a connection may instead go without one
    /// and authenticate each request with a token.
    private func requireClientCertificates(_ tlsConfiguration: inout TLSConfiguration) throws {
        guard let clientAuthorityPath = configuration.clientCertificateAuthorityPath else { return }
        tlsConfiguration.certificateVerification = configuration.providerKeys.isEmpty ? .noHostnameVerification : .optionalVerification
        tlsConfiguration.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(clientAuthorityPath))
    }

    /// Sets up TLS and HTTP/2 on an accepted connection (runs on its event loop).
    private func configureConnection(_ channel: any Channel, sslContext: NIOSSLContext) throws {
        let pipeline = channel.pipeline.syncOperations
        try pipeline.addHandler(NIOSSLServerHandler(context: sslContext))
        let goAwayWriter = RawGoAwayWriter()
        try pipeline.addHandler(goAwayWriter)

        var connectionConfiguration = NIOHTTP2Handler.ConnectionConfiguration()
        connectionConfiguration.initialSettings = [
            HTTP2Setting(
                parameter: .maxConcurrentStreams,
                value: MockConnectionState.initialStreamLimit(self.configuration)
            ),
            HTTP2Setting(parameter: .maxHeaderListSize, value: 16 * 1024),
            HTTP2Setting(parameter: .initialWindowSize, value: MockAPNSConnectionHandler.streamWindowSize),
        ]
        try pipeline.addHandler(NIOHTTP2Handler(mode: .server, connectionConfiguration: connectionConfiguration))
        let connectionState = MockConnectionState(server: self, channel: channel, goAwayWriter: goAwayWriter)
        try pipeline.addHandler(MockAPNSConnectionHandler(server: self, connection: connectionState))
        try pipeline.addHandler(CloseOnErrorHandler())
    }

    // MARK: Observing

    /// Accepted (200) pushes for a device token (case-insensitive).
    public func pushCount(token: String) -> Int {
        let key = Encoding.asciiLowercased(token[...])
        return self.ledger.withLockedValue { $0.acceptedPushesByToken[key] ?? 0 }
    }

    /// Accepted (200) pushes over all tokens.
    public var totalAcceptedPushes: Int {
        self.ledger.withLockedValue { $0.totalAcceptedPushes }
    }

    /// How many answers the server gave per HTTP status.
    public func statusCounts() -> [Int: Int] {
        self.ledger.withLockedValue { $0.countsByStatus }
    }

    /// Accepted (200) pushes whose `apns-id` had already been accepted before (resent notifications).
    public var repeatedAPNSIDCount: Int {
        self.ledger.withLockedValue { $0.repeatedAPNSIDCount }
    }

    /// TCP connections accepted since the server started (a probe's included).
    public var acceptedConnectionCount: Int {
        listener.acceptedConnectionCount
    }

    /// Stream concurrency, GOAWAYs and unanswered requests over all connections so far.
    public func streamStatistics() -> StreamStatistics {
        self.ledger.withLockedValue { $0.streams }
    }

    /// The most recent requests, oldest first (at most ``MockAPNSConfiguration/requestLogLimit``).
    public func receivedRequests() -> [ReceivedRequest] {
        self.ledger.withLockedValue { $0.requestLog.inArrivalOrder }
    }

    /// From now on, pushes to `token` answer 410 Unregistered with timestamp `millis`.
    public func markUnregistered(token: String, at millis: Int64) {
        let key = Encoding.asciiLowercased(token[...])
        self.ledger.withLockedValue { $0.unregisteredTokens[key] = millis }
    }

    /// From now on, answers with `faults`' error statuses and latency (an outage starting or
    /// ending); connection faults (GOAWAY, the one-stream rule) stay as configured.
    public func setFaults(_ faults: MockAPNSFaults) {
        self.ledger.withLockedValue { $0.faults = faults }
    }

    /// Clears the counters, the seen apns-ids and the request log (unregistered tokens stay).
    public func reset() {
        self.ledger.withLockedValue { $0.reset() }
    }
}

extension MockAPNSServer {
    /// How clients used streams, as ``streamStatistics()`` reports it.
    public struct StreamStatistics: Sendable, Hashable {
        /// The most requests one connection had in flight before any request on it succeeded.
        public var peakConcurrentStreamsBeforeFirstSuccess = 0
        /// The most requests one connection had in flight after its first success.
        public var peakConcurrentStreamsAfterFirstSuccess = 0
        /// GOAWAY frames sent by the fault injection.
        public var goAwaysSent = 0
        /// Requests that were never processed or answered: above a GOAWAY's last stream id, or
        /// their stream closed first (reset by the client, connection lost).
        public var unansweredRequests = 0

        public init() {}
    }

    func recordPeakConcurrentStreams(_ streams: Int, afterFirstSuccess: Bool) {
        self.ledger.withLockedValue { ledger in
            if afterFirstSuccess {
                ledger.streams.peakConcurrentStreamsAfterFirstSuccess = max(
                    ledger.streams.peakConcurrentStreamsAfterFirstSuccess,
                    streams
                )
            } else {
                ledger.streams.peakConcurrentStreamsBeforeFirstSuccess = max(
                    ledger.streams.peakConcurrentStreamsBeforeFirstSuccess,
                    streams
                )
            }
        }
    }

    func recordGoAway() {
        self.ledger.withLockedValue { $0.streams.goAwaysSent += 1 }
    }

    func recordUnansweredRequest() {
        self.ledger.withLockedValue { $0.streams.unansweredRequests += 1 }
    }
}
