import HTTP2Transport
import APNSCore
import Metrics
import Synchronization

/// What the APNs client's connections do, through swift-metrics, per endpoint (`host` is the
/// endpoint's authority, e.g. `api.push.apple.com`):
/// `herald_apns_connections{host}` and `herald_apns_streams_in_use{host}` (gauges, refreshed by
/// ``APNSHTTP2Client/recordPoolState()``), `herald_apns_connection_failures_total{host}`,
/// `herald_apns_goaways_total{host}` and `herald_apns_provider_tokens_total` (tokens signed).
final class APNSClientMetrics: Sendable {
    private let connections: [APNSEnvironment: Gauge]
    private let streamsInUse: [APNSEnvironment: Gauge]
    private let connectionFailures: [APNSEnvironment: Counter]
    private let goAways: [APNSEnvironment: Counter]
    let providerTokens: Counter

    init(configuration: APNSClientConfiguration, factory: any MetricsFactory) {
        func each<Metric>(_ make: (String) -> Metric) -> [APNSEnvironment: Metric] {
            Dictionary(uniqueKeysWithValues: [APNSEnvironment.production, .sandbox].map { ($0, make(configuration.endpoint(for: $0).authority)) })
        }
        connections = each { Gauge(label: "herald_apns_connections", dimensions: [("host", $0)], factory: factory) }
        streamsInUse = each { Gauge(label: "herald_apns_streams_in_use", dimensions: [("host", $0)], factory: factory) }
        connectionFailures = each { Counter(label: "herald_apns_connection_failures_total", dimensions: [("host", $0)], factory: factory) }
        goAways = each { Counter(label: "herald_apns_goaways_total", dimensions: [("host", $0)], factory: factory) }
        providerTokens = Counter(label: "herald_apns_provider_tokens_total", factory: factory)
    }

    func recordConnectionFailure(_ environment: APNSEnvironment) { connectionFailures[environment]?.increment() }
    func recordGoAway(_ environment: APNSEnvironment) { goAways[environment]?.increment() }

    func recordUsage(_ environment: APNSEnvironment, connections open: Int, streamsInUse streams: Int) {
        connections[environment]?.record(open)
        streamsInUse[environment]?.record(streams)
    }
}

/// A provider-token source that counts the tokens it hands out for the first time (each one
/// signed by the wrapped source).
final class CountingTokenSource: APNSProviderTokenSource {
    private let source: any APNSProviderTokenSource
    private let signed: Counter
    private let last = Mutex<String?>(nil)

    init(_ source: any APNSProviderTokenSource, counting signed: Counter) {
        self.source = source
        self.signed = signed
    }

    func currentToken() async throws -> String {
        let token = try await source.currentToken()
        let isNew = last.withLock { last in
            defer { last = token }
            return last != token
        }
        if isNew { signed.increment() }
        return token
    }

    func replaceExpired(_ token: String) async throws -> Bool {
        try await source.replaceExpired(token)
    }
}
