import APNSCore
import PushCore
import Crypto
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOSSL
import APNSWire
import HTTP2TLS
import HTTP2Transport

/// Credentials: one pool per distinct credential, the identity that tells two credentials
/// apart, and replacing them while running (a reloaded credentials file).
extension APNSHTTP2Client {
    /// One pool per distinct credential (topics naming the same credential share its pool);
    /// pools in `existing` with the same identity are kept with their connections.
    static func makeRouting(
        default defaultAuthentication: APNSClientConfiguration.Authentication?,
        byTopic: [String: APNSClientConfiguration.Authentication],
        reusing existing: [String: CredentialPool],
        configuration: APNSClientConfiguration,
        eventLoopGroup: any EventLoopGroup,
        metrics: APNSClientMetrics,
        makeDefaultTokenSource: (@Sendable () -> any APNSProviderTokenSource)? = nil
    ) throws -> Routing {
        var routing = Routing()
        func pool(for authentication: APNSClientConfiguration.Authentication, isDefault: Bool) throws -> CredentialPool {
            let identity = try identity(of: authentication)
            if let pool = routing.poolsByIdentity[identity] ?? existing[identity] {
                routing.poolsByIdentity[identity] = pool
                return pool
            }
            var tokenSource: (@Sendable () -> any APNSProviderTokenSource)?
            if isDefault, let makeDefaultTokenSource {
                tokenSource = { CountingTokenSource(makeDefaultTokenSource(), counting: metrics.providerTokens) }
            } else if case .token(let credentials) = authentication.backing {
                tokenSource = {
                    CountingTokenSource(
                        ProviderTokenManager(credentials: credentials, clock: ContinuousClock()),
                        counting: metrics.providerTokens
                    )
                }
            }
            let factory = APNSConnection.Factory(
                connector: HTTP2TLSConnector(
                    eventLoopGroup: eventLoopGroup,
                    sslContext: try makeSSLContext(configuration, authentication: authentication),
                    connectTimeout: configuration.connectTimeout,
                    pingInterval: configuration.pingInterval,
                    pingTimeout: configuration.pingTimeout
                ),
                makeTokenSource: tokenSource
            )
            let state = PoolStateMachine(
                connectionsPerEndpoint: configuration.connectionsPerEndpoint,
                maximumWaiters: configuration.maximumQueuedRequests,
                requiresVerification: authentication.usesProviderTokens,
                peerName: "APNs"
            )
            let pool = CredentialPool(factory: factory, state: state, name: isDefault ? "default" : authentication.description)
            routing.poolsByIdentity[identity] = pool
            return pool
        }
        routing.defaultPool = try defaultAuthentication.map { try pool(for: $0, isDefault: true) }
        for (topic, authentication) in byTopic.sorted(by: { $0.key < $1.key }) {
            routing.poolsByTopic[topic] = try pool(for: authentication, isDefault: false)
        }
        return routing
    }

    /// Tells credentials apart without comparing secrets: two credentials with the same identity
    /// share connections, and a replaced credential (a new key, or a certificate file whose
    /// content changed) gets new ones.
    static func identity(of authentication: APNSClientConfiguration.Authentication) throws -> String {
        func digest(_ path: String) throws -> String {
            guard let contents = FileManager.default.contents(atPath: path) else {
                throw APNSClientConfigurationError("cannot read \(path)")
            }
            return Data(SHA256.hash(data: contents)).base64EncodedString()
        }
        switch authentication.backing {
        case .token(let credentials):
            let publicKey = Data(SHA256.hash(data: credentials.privateKey.publicKey.rawRepresentation)).base64EncodedString()
            return "token:\(credentials.keyID):\(credentials.teamID):\(publicKey)"
        case .pkcs12(let path, _):
            return "pkcs12:\(path):\(try digest(path))"
        case .pem(let certificatePath, let privateKeyPath):
            return "pem:\(certificatePath):\(try digest(certificatePath)):\(try digest(privateKeyPath))"
        }
    }

    /// Replaces the credentials while the client runs: requests use the new ones from now on.
    ///
    /// A credential that is unchanged (same key, or same certificate file contents) keeps its
    /// connections. A replaced or removed one is retired: its connections take no new streams
    /// and close once their in-flight requests were answered (within
    /// ``APNSClientConfiguration/shutdownGracePeriod``), and requests waiting for one of its
    /// streams move to the new routing without counting an attempt. Nothing is sent twice.
    ///
    /// Returns false when nothing changed (same credentials for the same topics). Throws
    /// ``APNSClientConfigurationError`` when a new credential cannot be loaded; the old ones then
    /// stay in use.
    @discardableResult
    public func replaceCredentials(
        default defaultAuthentication: APNSClientConfiguration.Authentication?,
        byTopic: [String: APNSClientConfiguration.Authentication]
    ) throws -> Bool {
        replacing.lock()
        defer { replacing.unlock() }
        let current = routing.withLockedValue { $0.routing.poolsByIdentity }
        // A client that serves apps is never left without a credential by a replacement; one
        // that started with none (an Android-only deployment) may stay so.
        guard defaultAuthentication != nil || !byTopic.isEmpty || current.isEmpty else {
            throw APNSClientConfigurationError("no credential: give a default one or one per topic")
        }
        let next = try Self.makeRouting(
            default: defaultAuthentication,
            byTopic: byTopic,
            reusing: current,
            configuration: configuration,
            eventLoopGroup: eventLoopGroup,
            metrics: metrics
        )
        let retired: [CredentialPool]? = routing.withLockedValue { state in
            guard state.phase != .stopped, !state.routing.routesTheSame(as: next) else { return nil }
            let retired = state.routing.poolsByIdentity.filter { next.poolsByIdentity[$0.key] == nil }.map(\.value)
            // Marked inside the lock: no request resolves a retired pool after this.
            for pool in retired { pool.retire() }
            state.routing = next
            return retired
        }
        guard let retired else { return false }
        for pool in retired { stop(pool, because: "the credential was replaced") }
        let added = next.poolsByIdentity.keys.filter { current[$0] == nil }.count
        logger.info(
            "APNs credentials replaced",
            metadata: [
                APNSLoggingKeys.credentialsKept: "\(next.poolsByIdentity.count - added)",
                APNSLoggingKeys.credentialsAdded: "\(added)",
                APNSLoggingKeys.credentialsRetired: "\(retired.count)",
            ]
        )
        return true
    }

    /// Stops a pool: its waiters fail with `shuttingDown` (a retired pool's move on, see
    /// ``sendOnce(_:environment:deadline:)``) and its connections close after their in-flight
    /// streams, within ``APNSClientConfiguration/shutdownGracePeriod``.
    func stop(_ pool: CredentialPool, because reason: String) {
        let (waiters, connections, timer) = pool.state.withLockedValue { $0.shutDown() }
        timer?.cancel()
        for waiter in waiters {
            waiter.recipient.resume(throwing: TransportError.shuttingDown(reason))
        }
        for connection in connections {
            connection.closeGracefully(within: configuration.shutdownGracePeriod)
        }
    }
}
