import Baton

extension BatonConfiguration.Jobs {
    /// The throttle's limits these keys give.
    public var throttleLimits: ThrottleLimits {
        ThrottleLimits(maxReplicaLag: maxReplicaLagSeconds > 0 ? Double(maxReplicaLagSeconds) : nil, maxActiveBackends: maxActiveBackends)
    }
}
