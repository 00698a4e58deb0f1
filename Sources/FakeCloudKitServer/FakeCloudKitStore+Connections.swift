import NIOCore
import Synchronization

/// The connections CloudKit requests arrive on: counted (how many TCP connections a client used,
/// over HTTP/2 or HTTP/1.1), and misdirected on request (`faults/misdirect`): a connection Apple's
/// edge holds for another host answers 421 to whatever is sent on it.
extension FakeCloudKitStore {
    func setCourierPort(_ port: Int) {
        courierPort = port
    }

    /// Notes a CloudKit request on `connection`; true when the request is to be answered 421
    /// Misdirected Request.
    func arrived(on connection: any Channel) -> Bool {
        let closed = closedConnections.withLock { closed in
            defer { closed = [] }
            return closed
        }
        for id in closed { forget(id) }
        let id = ObjectIdentifier(connection)
        if !countedConnections.contains(id) {
            countedConnections.insert(id)
            traffic.connections += 1
        }
        if openConnections[id] == nil {
            openConnections[id] = connection
            // Noted from NIO's thread under a lock and applied here, at the next arrival (before
            // any new connection could take this one's identity, since `openConnections` holds
            // it until then). Not a `Task` into the actor: a task started from NIO's callback
            // waits for a thread of the cooperative pool, and behind it every request of a
            // server whose actor it had scheduled there; a test's request once waited 20 s so.
            connection.closeFuture.whenComplete { [self] _ in closedConnections.withLock { $0.append(id) } }
        }
        guard var fault = misdirect else { return false }
        if fault.connection == nil { fault.connection = id }
        guard fault.connection == id else { return false }
        fault.remaining -= 1
        misdirect = fault.remaining > 0 ? fault : nil
        traffic.misdirected += 1
        return true
    }

    private func forget(_ id: ObjectIdentifier) {
        openConnections[id] = nil
        countedConnections.remove(id)
        // A misdirected connection that closed takes its fault with it: Apple's edge answers
        // a fresh connection normally.
        if misdirect?.connection == id { misdirect = nil }
    }
}
