import APNSCore
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization
import APNSWire
import HTTP2TLS
import HTTP2Transport

/// Where a connection gets its provider tokens; ``ProviderTokenManager`` in production, a scripted
/// source in tests.
protocol APNSProviderTokenSource: Sendable {
    func currentToken() async throws -> String
    func replaceExpired(_ token: String) async throws -> Bool
}

extension ProviderTokenManager: APNSProviderTokenSource {}

/// One HTTP/2 connection to an APNs endpoint: a `Sendable` face for the loop-bound
/// ``APNSConnectionHandler``, plus the connection's own provider-token manager.
///
/// Each connection signs and refreshes its own token (a token kept per connection), so a
/// connection never sees its token change sooner than 20 minutes after it started using it,
/// whatever other connections do; APNs answers TooManyProviderTokenUpdates otherwise.
final class APNSConnection: HTTP2StreamConnection {
    /// How often the connection asks its token manager whether the token is due for renewal.
    static let tokenCheckInterval: Duration = .seconds(60)

    let id: Int
    let environment: APNSEnvironment
    /// The pool keeps APNs' connections by environment.
    var endpoint: APNSEnvironment { environment }
    let tokenManager: (any APNSProviderTokenSource)?
    private let channel: any Channel
    let handler: NIOLoopBound<APNSConnectionHandler>
    private let logger: Logger
    private let requestIDs = Atomic<UInt64>(0)

    private init(
        id: Int,
        environment: APNSEnvironment,
        tokenManager: (any APNSProviderTokenSource)?,
        channel: any Channel,
        handler: NIOLoopBound<APNSConnectionHandler>,
        logger: Logger
    ) {
        self.id = id
        self.environment = environment
        self.tokenManager = tokenManager
        self.channel = channel
        self.handler = handler
        self.logger = logger
    }

    /// Everything needed to open connections; built once per client.
    struct Factory: Sendable {
        var connector: HTTP2TLSConnector
        /// Makes a connection's token source: one per connection, so each keeps its own token.
        var makeTokenSource: (@Sendable () -> any APNSProviderTokenSource)?

        /// Connects, completes TLS (ALPN h2) and waits for the server's first SETTINGS frame.
        /// Returns the connection and the server's stream limit.
        func connect(
            id: Int,
            environment: APNSEnvironment,
            endpoint: APNSClientConfiguration.Endpoint,
            logger: Logger,
            onEvent: @escaping @Sendable (HTTP2ConnectionEvent) -> Void
        ) async throws -> (APNSConnection, streamLimit: Int) {
            let tokenManager = makeTokenSource?()
            let providerToken = try await tokenManager?.currentToken()
            let (channel, handler, streamLimit) = try await connector.connect(to: endpoint.serverAddress) { configuration, ready in
                APNSConnectionHandler(
                    configuration: configuration,
                    providerToken: providerToken,
                    readyPromise: ready,
                    logger: logger,
                    onEvent: onEvent
                )
            }
            let connection = APNSConnection(
                id: id,
                environment: environment,
                tokenManager: tokenManager,
                channel: channel,
                handler: handler,
                logger: logger
            )
            return (connection, streamLimit)
        }
    }

    /// A new ID for a stream of this connection (``execute(_:deadline:)``, ``start(_:deadline:)``).
    func nextRequestID() -> UInt64 {
        requestIDs.wrappingAdd(1, ordering: .relaxed).newValue
    }

    /// Makes streams opened from now on carry `token`.
    func installProviderToken(_ token: String) {
        let handler = self.handler
        channel.eventLoop.execute { handler.value.installProviderToken(token) }
    }

    /// Takes no new streams and closes when in-flight streams finished, at the latest after `timeout`.
    func closeGracefully(within timeout: Duration) {
        let handler = self.handler
        channel.eventLoop.execute { handler.value.closeGracefully(within: TimeAmount(timeout)) }
    }

    /// Closes at once; in-flight streams fail with ``TransportError/connectionFailed(_:)``.
    func close() {
        channel.close(promise: nil)
    }

    /// Runs until the channel closes (cancellation closes it), refreshing the provider token meanwhile.
    func runUntilClosed() async {
        let channel = self.channel
        await withTaskCancellationHandler {
            await withDiscardingTaskGroup { group in
                if let tokenManager {
                    group.addTask { await self.keepProviderTokenFresh(tokenManager) }
                }
                try? await channel.closeFuture.get()
                group.cancelAll()
            }
        } onCancel: {
            channel.close(promise: nil)
        }
    }

    private func keepProviderTokenFresh(_ manager: any APNSProviderTokenSource) async {
        var installed = try? await manager.currentToken()
        while !Task.isCancelled {
            do {
                try await Task.sleep(for: Self.tokenCheckInterval)
                let token = try await manager.currentToken()
                if token != installed {
                    installProviderToken(token)
                    installed = token
                    logger.debug("APNs provider token renewed")
                }
            } catch is CancellationError {
                return
            } catch {
                logger.error("Signing an APNs provider token failed", metadata: [APNSLoggingKeys.error: "\(error)"])
            }
        }
    }
}
