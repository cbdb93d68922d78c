import Metrics

/// What the FCM client does, through swift-metrics: access-token exchanges by project and
/// result, refreshes that failed, and how long each send request took.
///
/// - `herald_fcm_token_exchanges_total{project,result}`: `result` is `ok` or `failed`.
/// - `herald_fcm_token_refresh_failures_total{project}`: failed exchanges (a project without a
///   valid token cannot send; see the HeraldFCMTokenRefreshFailing alert).
/// - `herald_fcm_request_duration_seconds{outcome}`: one send request, from the POST to its
///   answer; `outcome` is `answered` (any HTTP status) or `transport_error`.
/// - `herald_fcm_connections` and `herald_fcm_streams_in_use` (gauges, refreshed by
///   ``FCMHTTPClient/recordPoolState()``), `herald_fcm_goaways_total`: FCM's one endpoint.
final class FCMClientMetrics: Sendable {
    private let factory: any MetricsFactory
    private let answered: Timer
    private let transportError: Timer
    private let connections: Gauge
    private let streamsInUse: Gauge
    let goAways: Counter

    init(factory: any MetricsFactory) {
        self.factory = factory
        answered = Timer(label: "herald_fcm_request_duration_seconds", dimensions: [("outcome", "answered")], factory: factory)
        transportError = Timer(label: "herald_fcm_request_duration_seconds", dimensions: [("outcome", "transport_error")], factory: factory)
        connections = Gauge(label: "herald_fcm_connections", factory: factory)
        streamsInUse = Gauge(label: "herald_fcm_streams_in_use", factory: factory)
        goAways = Counter(label: "herald_fcm_goaways_total", factory: factory)
    }

    /// Records the connections open to FCM and the streams in use on them.
    func recordUsage(connections open: Int, streamsInUse streams: Int) {
        connections.record(open)
        streamsInUse.record(streams)
    }

    /// Makes the counters of `projectIDs` exist at 0, so a first failure is a rise an alert sees.
    func prepare(projectIDs: some Sequence<String>) {
        for projectID in projectIDs {
            for result in ["ok", "failed"] {
                _ = Counter(label: "herald_fcm_token_exchanges_total", dimensions: [("project", projectID), ("result", result)], factory: factory)
            }
            _ = Counter(label: "herald_fcm_token_refresh_failures_total", dimensions: [("project", projectID)], factory: factory)
        }
    }

    /// Records one exchange for `projectID`.
    func tokenExchange(projectID: String, succeeded: Bool) {
        Counter(
            label: "herald_fcm_token_exchanges_total",
            dimensions: [("project", projectID), ("result", succeeded ? "ok" : "failed")],
            factory: factory
        ).increment()
        if !succeeded {
            Counter(label: "herald_fcm_token_refresh_failures_total", dimensions: [("project", projectID)], factory: factory).increment()
        }
    }

    /// Records one send request that took `duration`.
    func request(duration: Duration, answered wasAnswered: Bool) {
        (wasAnswered ? answered : transportError).record(duration: duration)
    }
}
