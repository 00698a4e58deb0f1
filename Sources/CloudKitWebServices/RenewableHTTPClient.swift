import AsyncHTTPClient
import Synchronization

/// The HTTP client the API's requests go through, with a way to drop its connections: a
/// connection Apple's edge calls misdirected (421 without CloudKit's body) answers 421 to
/// whatever is sent on it, and AsyncHTTPClient offers no way to close one pooled connection. So
/// the whole client is replaced by a fresh one; the old one is shut down once the requests it
/// carries have answered (rhoopr/kei#201 does the same: a fresh connection before anything else).
///
/// A client the caller owns is never replaced: a retry then goes through its pool as it is.
final class RenewableHTTPClient: Sendable {
    struct Lease: Sendable {
        let client: HTTPClient
        let generation: Int
    }

    private struct State {
        var generation = 0
        var client: HTTPClient
        /// Requests in flight, by the generation of the client they went through.
        var inFlight: [Int: Int] = [:]
        /// Replaced clients with requests still in flight.
        var retired: [Int: HTTPClient] = [:]
    }

    private let state: Mutex<State>
    /// Makes a fresh client; nil when the client is the caller's.
    private let make: (@Sendable () -> HTTPClient)?

    init(owned make: @escaping @Sendable () -> HTTPClient) {
        self.make = make
        state = Mutex(State(client: make()))
    }

    init(callersClient client: HTTPClient) {
        make = nil
        state = Mutex(State(client: client))
    }

    /// The client to send one request through; give it back once its answer is read.
    func lease() -> Lease {
        state.withLock { state in
            state.inFlight[state.generation, default: 0] += 1
            return Lease(client: state.client, generation: state.generation)
        }
    }

    func giveBack(_ lease: Lease) {
        let finished: HTTPClient? = state.withLock { state in
            let left = state.inFlight[lease.generation, default: 1] - 1
            state.inFlight[lease.generation] = left > 0 ? left : nil
            guard left <= 0, let retired = state.retired.removeValue(forKey: lease.generation) else { return nil }
            return retired
        }
        if let finished { Task { try? await finished.shutdown() } }
    }

    /// Replaces the client `lease` came from, unless another request replaced it already (many
    /// requests in flight on one misdirected HTTP/2 connection renew it once). Returns whether
    /// the next lease gets a fresh client.
    @discardableResult
    func renew(after lease: Lease) -> Bool {
        guard let make else { return false }
        let old: HTTPClient? = state.withLock { state in
            guard state.generation == lease.generation else { return nil }
            let old = state.client
            state.client = make()
            state.generation += 1
            if state.inFlight[lease.generation, default: 0] > 0 {
                state.retired[lease.generation] = old
                return nil
            }
            return old
        }
        if let old { Task { try? await old.shutdown() } }
        return true
    }

    /// Shuts down the current client and every replaced one (nothing is in flight by now).
    func shutdown() async throws {
        guard make != nil else { return }
        let clients = state.withLock { state in
            let clients = [state.client] + state.retired.values
            state.retired = [:]
            return clients
        }
        for client in clients.dropFirst() { try? await client.shutdown() }
        try await clients[0].shutdown()
    }
}
