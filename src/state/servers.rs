//! The servers of a snapshot: each record in a slot of its own, and the
//! occupied slots in id order.
//!
//! The state owner writes one server's record per observation, a thousand
//! or more times a second, and publishes ten times a second. Both vectors
//! are shared with the published snapshots: the first write after a
//! publish copies the vector of slots (a pointer per server, once per
//! publish), and each write after it is an index into it. A persistent
//! tree, its predecessor, looked every write up by comparing ids down a
//! path and copied that path, which made it most of the owner's work.
//! Readers look a server up by id with a binary search of the order.
//!
//! Generic over the record (the snapshot's `ServerRecord`), so this file
//! and the snapshot's do not name each other.

use std::sync::Arc;

/// A server's place in [`Servers`], stable while it is in the fleet.
pub type Slot = u32;

/// A held server: its id and its record.
type Held<R> = (Arc<str>, Arc<R>);

/// Servers by id, in id order; see the module documentation.
#[derive(Debug)]
pub struct Servers<R> {
    /// Records by slot; a removed server's slot is empty until reused.
    slots: Arc<Vec<Option<Held<R>>>>,
    /// The occupied slots, in id order.
    order: Arc<Vec<Slot>>,
    /// Empty slots, reused first.
    free: Vec<Slot>,
}

impl<R> Default for Servers<R> {
    fn default() -> Self {
        Servers {
            slots: Arc::default(),
            order: Arc::default(),
            free: Vec::new(),
        }
    }
}

impl<R> Clone for Servers<R> {
    fn clone(&self) -> Self {
        Servers {
            slots: self.slots.clone(),
            order: self.order.clone(),
            free: self.free.clone(),
        }
    }
}

impl<R> Servers<R> {
    /// Servers held.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether no server is held.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// `id`'s record.
    pub fn get(&self, id: &str) -> Option<&Arc<R>> {
        let at = self.position(id).ok()?;
        self.at(self.order[at]).map(|(_, r)| r)
    }

    /// Whether `id` is held.
    pub fn contains_key(&self, id: &str) -> bool {
        self.position(id).is_ok()
    }

    /// Ids and records, in id order.
    pub fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &Arc<R>)> {
        (self.order.iter()).filter_map(|&s| self.at(s).map(|(id, r)| (id, r)))
    }

    /// Records, in id order.
    pub fn values(&self) -> impl Iterator<Item = &Arc<R>> {
        self.iter().map(|(_, r)| r)
    }

    /// Hold `record` as `id`'s: in its slot when it is held already (the
    /// record it replaces returned), else in a free one. Says which slot.
    pub fn insert(&mut self, id: Arc<str>, record: Arc<R>) -> (Slot, Option<Arc<R>>) {
        match self.position(&id) {
            Ok(at) => {
                let slot = self.order[at];
                let held = &mut Arc::make_mut(&mut self.slots)[slot as usize];
                let old = held.replace((id, record)).map(|(_, r)| r);
                (slot, old)
            }
            Err(at) => {
                let slots = Arc::make_mut(&mut self.slots);
                let slot = match self.free.pop() {
                    Some(slot) => slot,
                    None => {
                        slots.push(None);
                        Slot::try_from(slots.len() - 1).expect("fewer than 2^32 servers")
                    }
                };
                slots[slot as usize] = Some((id, record));
                Arc::make_mut(&mut self.order).insert(at, slot);
                (slot, None)
            }
        }
    }

    /// Stop holding `id`: its record.
    pub fn remove(&mut self, id: &str) -> Option<Arc<R>> {
        let at = self.position(id).ok()?;
        let slot = Arc::make_mut(&mut self.order).remove(at);
        self.free.push(slot);
        Arc::make_mut(&mut self.slots)[slot as usize]
            .take()
            .map(|(_, r)| r)
    }

    /// The record in `slot`, to write: the first write after a publish
    /// copies the vector of slots, not the records.
    pub fn slot_mut(&mut self, slot: Slot) -> Option<&mut Arc<R>> {
        let held = Arc::make_mut(&mut self.slots).get_mut(slot as usize)?;
        held.as_mut().map(|(_, r)| r)
    }

    fn at(&self, slot: Slot) -> Option<&Held<R>> {
        self.slots.get(slot as usize)?.as_ref()
    }

    /// Where `id` is (`Ok`) or would go (`Err`) in the order.
    fn position(&self, id: &str) -> Result<usize, usize> {
        (self.order).binary_search_by(|&s| self.at(s).map_or("", |(held, _)| &**held).cmp(id))
    }
}

impl<'a, R> IntoIterator for &'a Servers<R> {
    type Item = (&'a Arc<str>, &'a Arc<R>);
    type IntoIter = Box<dyn Iterator<Item = Self::Item> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

impl<R> std::ops::Index<&str> for Servers<R> {
    type Output = Arc<R>;

    /// `id`'s record; panics when it is not held, as a map's index does.
    fn index(&self, id: &str) -> &Arc<R> {
        self.get(id).expect("no server of that id")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids<R>(s: &Servers<R>) -> Vec<&str> {
        s.iter().map(|(id, _)| &**id).collect()
    }

    fn record(text: &str) -> Arc<String> {
        Arc::new(text.to_owned())
    }

    #[test]
    fn ids_come_in_order_whatever_the_order_they_came_in() {
        let mut s = Servers::default();
        for id in ["m", "b", "z", "a", "q"] {
            s.insert(Arc::from(id), record(id));
        }
        assert_eq!(ids(&s), ["a", "b", "m", "q", "z"]);
        assert_eq!(s.len(), 5);
        assert_eq!(*s["q"], "q");
        assert!(s.get("c").is_none());
        assert!(s.contains_key("z") && !s.contains_key("y"));
    }

    #[test]
    fn a_slot_is_stable_while_held_and_reused_once_free() {
        let mut s = Servers::default();
        let (a, _) = s.insert(Arc::from("a"), record("a"));
        let (b, _) = s.insert(Arc::from("b"), record("b"));
        let (again, old) = s.insert(Arc::from("a"), record("a2"));
        assert_eq!((again, old.as_deref().map(String::as_str)), (a, Some("a")));
        assert_eq!(*s["a"], "a2", "replaced in place");
        assert!(s.remove("a").is_some());
        assert!(s.remove("a").is_none(), "gone");
        assert!(s.slot_mut(a).is_none(), "an empty slot holds nothing");
        let (c, _) = s.insert(Arc::from("c"), record("c"));
        assert_eq!(c, a, "the free slot is reused");
        assert_eq!(ids(&s), ["b", "c"]);
        assert_eq!(s.slot_mut(b).map(|r| r.as_str()), Some("b"));
    }

    #[test]
    fn a_published_copy_never_sees_a_later_write() {
        let mut s = Servers::default();
        let (slot, _) = s.insert(Arc::from("a"), record("a"));
        let published = s.clone();
        let r = s.slot_mut(slot).expect("held");
        *Arc::make_mut(r) = "written".to_owned();
        s.insert(Arc::from("b"), record("b"));
        s.remove("a");
        assert_eq!(*published["a"], "a");
        assert_eq!(ids(&published), ["a"]);
        assert_eq!(ids(&s), ["b"]);
        assert_eq!(s.len(), 1);
    }
}
