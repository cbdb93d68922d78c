import APNSCore
import PushCore
import Logging
import NIOCore
import NIOConcurrencyHelpers
import NIOSSL
import ServiceLifecycle
import APNSWire
import HTTP2Transport

/// The client's connections: opening them as the pool plans, running each until it closes,
/// turning their events into pool actions, and the TLS contexts they are made with.
extension APNSHTTP2Client {
    // MARK: Connections

    func requestConnection(_ plan: HTTP2ConnectionPlan<APNSEnvironment>, pool: CredentialPool) {
        if case .terminated = connectionPlanSink.yield(PlannedConnection(pool: pool, plan: plan)) {
            // run() has ended: the pool is shut down, so report the plan as failed to keep it consistent.
            perform(
                pool.state.withLockedValue {
                    $0.connectionClosed(
                        connectionID: plan.connectionID,
                        endpoint: plan.endpoint,
                        failure: .shuttingDown("client stopped")
                    )
                },
                pool: pool
            )
        }
    }

    /// One connection's life: backoff, connect, serve until closed, report.
    func runConnection(_ plan: HTTP2ConnectionPlan<APNSEnvironment>, pool: CredentialPool) async {
        let endpoint = configuration.endpoint(for: plan.endpoint)
        var logger = self.logger
        logger[metadataKey: APNSLoggingKeys.connectionID] = "\(plan.connectionID)"
        logger[metadataKey: APNSLoggingKeys.endpoint] = "\(endpoint)"
        if pool.name != "default" { logger[metadataKey: APNSLoggingKeys.credential] = "\(pool.name)" }

        let connection: APNSConnection
        let streamLimit: Int
        do {
            let factory = pool.factory
            let loggerForConnection = logger
            (connection, streamLimit) = try await cancelWhenGracefulShutdown {
                if plan.delay > .zero {
                    var generator = SystemRandomNumberGenerator()
                    try await Task.sleep(for: Backoff.reconnection.jittered(plan.delay, using: &generator))
                }
                return try await factory.connect(
                    id: plan.connectionID,
                    environment: plan.endpoint,
                    endpoint: endpoint,
                    logger: loggerForConnection,
                    onEvent: { [weak self] event in
                        self?.connectionEvent(
                            event,
                            connectionID: plan.connectionID,
                            environment: plan.endpoint,
                            pool: pool
                        )
                    }
                )
            }
        } catch {
            if !(error is CancellationError) {
                logger.warning("Connecting to APNs failed", metadata: [APNSLoggingKeys.error: "\(error)"])
                metrics.recordConnectionFailure(plan.endpoint)
            }
            perform(
                pool.state.withLockedValue {
                    $0.connectionClosed(
                        connectionID: plan.connectionID,
                        endpoint: plan.endpoint,
                        failure: error as? TransportError ?? .connectionFailed("\(error)")
                    )
                },
                pool: pool
            )
            return
        }

        logger.info(
            "Connected to APNs",
            metadata: [APNSLoggingKeys.maxConcurrentStreams: "\(streamLimit)"]
        )
        perform(pool.state.withLockedValue { $0.connectionReady(connection, streamLimit: streamLimit) }, pool: pool)
        await connection.runUntilClosed()
        perform(
            pool.state.withLockedValue {
                $0.connectionClosed(connectionID: plan.connectionID, endpoint: plan.endpoint, failure: nil)
            },
            pool: pool
        )
        logger.info("APNs connection closed")
    }

    func connectionEvent(
        _ event: HTTP2ConnectionEvent,
        connectionID: Int,
        environment: APNSEnvironment,
        pool: CredentialPool
    ) {
        let actions: PoolStateMachine.Actions
        switch event {
        case .streamLimitChanged(let limit):
            logger.debug(
                "APNs changed the stream limit",
                metadata: [
                    APNSLoggingKeys.connectionID: "\(connectionID)",
                    APNSLoggingKeys.maxConcurrentStreams: "\(limit)",
                ]
            )
            actions = pool.state.withLockedValue {
                $0.streamLimitChanged(connectionID: connectionID, endpoint: environment, limit: limit)
            }
        case .goingAway(let errorCode, let reason):
            metrics.recordGoAway(environment)
            logger.warning(
                "APNs sent GOAWAY; draining the connection",
                metadata: [
                    APNSLoggingKeys.connectionID: "\(connectionID)",
                    APNSLoggingKeys.goAwayErrorCode: "\(errorCode)",
                    APNSLoggingKeys.goAwayReason: "\(reason ?? "none")",
                ]
            )
            actions = pool.state.withLockedValue {
                $0.connectionGoingAway(connectionID: connectionID, endpoint: environment)
            }
        case .closed(let failure):
            actions = pool.state.withLockedValue {
                $0.connectionClosed(connectionID: connectionID, endpoint: environment, failure: failure)
            }
        }
        perform(actions, pool: pool)
    }

    // MARK: TLS

    static func makeSSLContext(
        _ configuration: APNSClientConfiguration,
        authentication: APNSClientConfiguration.Authentication
    ) throws -> NIOSSLContext {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.applicationProtocols = ["h2"]
        tls.minimumTLSVersion = .tlsv12
        tls.certificateVerification = .fullVerification
        if let caPath = configuration.additionalTrustRootsPEMPath {
            do {
                let certificates = try NIOSSLCertificate.fromPEMFile(caPath)
                guard !certificates.isEmpty else {
                    throw APNSClientConfigurationError("no certificate in the CA file \(caPath)")
                }
                tls.additionalTrustRoots = [.certificates(certificates)]
            } catch let error as APNSClientConfigurationError {
                throw error
            } catch {
                throw APNSClientConfigurationError("cannot read the CA file \(caPath): \(error)")
            }
        }
        switch authentication.backing {
        case .token:
            break
        case .pkcs12(let path, let password):
            do {
                let bundle = try NIOSSLPKCS12Bundle(file: path, passphrase: password.map { Array($0.utf8) })
                tls.certificateChain = bundle.certificateChain.map { .certificate($0) }
                tls.privateKey = .privateKey(bundle.privateKey)
            } catch {
                // The error names the file, never the password.
                throw APNSClientConfigurationError("cannot load the PKCS#12 certificate \(path): \(error)")
            }
        case .pem(let certificatePath, let privateKeyPath):
            do {
                tls.certificateChain = try NIOSSLCertificate.fromPEMFile(certificatePath).map { .certificate($0) }
                tls.privateKey = .privateKey(try NIOSSLPrivateKey(file: privateKeyPath, format: .pem))
            } catch {
                throw APNSClientConfigurationError(
                    "cannot load the PEM certificate \(certificatePath) or key \(privateKeyPath): \(error)"
                )
            }
        }
        do {
            return try NIOSSLContext(configuration: tls)
        } catch {
            throw APNSClientConfigurationError("invalid TLS configuration: \(error)")
        }
    }
}
